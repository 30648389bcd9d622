//! [hakmem](../../README.md), a general-purpose memory allocator, as Rust's
//! global allocator.
//!
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: hakmem::HakMem = hakmem::HakMem;
//!
//! fn main() {
//!     let v: Vec<u64> = (0..1000).collect(); // served by hakmem
//!     assert_eq!(v.len(), 1000);
//! }
//! ```
//!
//! The crate compiles hakmem's C sources into a static library and calls
//! its `hak_*` functions only: the process's C `malloc`/`free` stay
//! glibc's (use `LD_PRELOAD` or `-lhakmem` for those). The `HAKMEM_*`
//! environment options apply as for C programs, e.g. `HAKMEM_STATS=1` for a
//! statistics report at exit.
#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;
use core::ptr;

extern "C" {
    fn hak_malloc(size: usize) -> *mut c_void;
    fn hak_calloc(nmemb: usize, size: usize) -> *mut c_void;
    fn hak_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn hak_free(p: *mut c_void);
    fn hak_aligned_alloc(align: usize, size: usize) -> *mut c_void;
    fn hak_malloc_usable_size(p: *mut c_void) -> usize;
    fn hak_stats_print(f: *mut c_void);
}

/// Alignment of every block `hak_malloc` returns.
const MIN_ALIGN: usize = 16;

/// hakmem as a [`GlobalAlloc`]: `#[global_allocator] static A: HakMem = HakMem;`
#[derive(Clone, Copy, Debug, Default)]
pub struct HakMem;

/// `hak_malloc` suffices when its 16-byte alignment covers the layout's (and,
/// like the standard library's System allocator, when the size is at least
/// the alignment); otherwise the aligned entry point is used.
#[inline]
fn plain(align: usize, size: usize) -> bool {
    align <= MIN_ALIGN && align <= size
}

unsafe impl GlobalAlloc for HakMem {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            hak_malloc(layout.size()) as *mut u8
        } else {
            hak_aligned_alloc(layout.align(), layout.size()) as *mut u8
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            return hak_calloc(1, layout.size()) as *mut u8;
        }
        let p = self.alloc(layout);
        if !p.is_null() {
            ptr::write_bytes(p, 0, layout.size());
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, _layout: Layout) {
        hak_free(p as *mut c_void)
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(layout.align(), new_size) {
            return hak_realloc(p as *mut c_void, new_size) as *mut u8;
        }
        // hak_realloc keeps only 16-byte alignment: move the block ourselves.
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let q = self.alloc(new_layout);
        if !q.is_null() {
            ptr::copy_nonoverlapping(p, q, if layout.size() < new_size { layout.size() } else { new_size });
            self.dealloc(p, layout);
        }
        q
    }
}

/// Bytes usable in the block at `p` (at least what was asked for).
///
/// # Safety
/// `p` must be a live block from [`HakMem`]; hakmem aborts the process with
/// an error message for a pointer it did not allocate.
pub unsafe fn usable_size(p: *const u8) -> usize {
    hak_malloc_usable_size(p as *mut c_void)
}

/// Print hakmem's statistics report (the one `HAKMEM_STATS=1` prints at
/// exit) on stderr.
pub fn print_stats() {
    unsafe { hak_stats_print(ptr::null_mut()) }
}
