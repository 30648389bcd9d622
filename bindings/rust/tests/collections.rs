//! Standard collections with hakmem as the global allocator.
use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, Layout};
use std::collections::{BTreeMap, HashMap, VecDeque};

use hakmem::HakMem;

#[global_allocator]
static GLOBAL: HakMem = HakMem;

#[test]
fn hakmem_is_the_global_allocator() {
    // hakmem's class for 100 bytes is 112 bytes; usable_size aborts for a
    // pointer hakmem did not allocate.
    let b = Box::new([7u8; 100]);
    assert_eq!(unsafe { hakmem::usable_size(b.as_ptr()) }, 112);
}

#[test]
fn vec_growth() {
    let mut v: Vec<u64> = Vec::new();
    for i in 0..1_000_000u64 {
        v.push(i * 3);
    }
    assert_eq!(v.iter().sum::<u64>(), 3 * (999_999 * 1_000_000 / 2));
    assert!(unsafe { hakmem::usable_size(v.as_ptr() as *const u8) } >= v.capacity() * 8);
    v.truncate(10);
    v.shrink_to_fit();
    assert_eq!(v, (0..10).map(|i| i * 3).collect::<Vec<u64>>());
    let mut nested: Vec<Vec<u32>> = (0..2000).map(|i| vec![i; (i % 300) as usize]).collect();
    for (i, inner) in nested.iter_mut().enumerate() {
        inner.extend(std::iter::repeat(i as u32).take(100));
    }
    for (i, inner) in nested.iter().enumerate() {
        assert_eq!(inner.len(), i % 300 + 100);
        assert!(inner.iter().all(|&x| x == i as u32));
    }
}

#[test]
fn strings() {
    let mut s = String::new();
    for i in 0..20_000 {
        s.push_str(&format!("{},", i));
    }
    let parts: Vec<&str> = s.trim_end_matches(',').split(',').collect();
    assert_eq!(parts.len(), 20_000);
    assert_eq!(parts[12_345], "12345");
    let words: Vec<String> = (0..5000).map(|i| "w".repeat(i % 700)).collect();
    assert_eq!(words.iter().map(|w| w.len()).sum::<usize>(), (0..5000).map(|i| i % 700).sum());
}

#[test]
fn maps_and_deques() {
    let mut m: HashMap<String, Vec<u8>> = HashMap::new();
    for i in 0..100_000u32 {
        m.insert(format!("key{}", i), vec![(i % 251) as u8; (i % 64) as usize]);
    }
    for i in (0..100_000u32).step_by(2) {
        m.remove(&format!("key{}", i));
    }
    assert_eq!(m.len(), 50_000);
    assert_eq!(m["key777"], vec![(777 % 251) as u8; 777 % 64]);
    let b: BTreeMap<u64, Box<[u64; 4]>> = (0..50_000u64).map(|i| (i, Box::new([i; 4]))).collect();
    assert_eq!(b[&4242][3], 4242);
    let mut d: VecDeque<String> = VecDeque::new();
    for i in 0..100_000 {
        d.push_back(i.to_string());
        if i % 3 == 0 {
            d.pop_front();
        }
    }
    assert_eq!(d.len(), 100_000 - 33_334);
}

#[repr(align(64))]
struct Line([u8; 64]);

#[repr(align(4096))]
struct Page([u8; 4096]);

#[repr(align(65536))]
struct Big([u8; 100]);

#[test]
fn big_aligned_types() {
    let lines: Vec<Line> = (0..1000).map(|i| Line([i as u8; 64])).collect();
    assert_eq!(lines.as_ptr() as usize % 64, 0);
    assert_eq!(lines[999].0[63], (999 % 256) as u8);
    let pages: Vec<Box<Page>> = (0..64).map(|i| Box::new(Page([i as u8; 4096]))).collect();
    for (i, p) in pages.iter().enumerate() {
        assert_eq!(&**p as *const Page as usize % 4096, 0);
        assert_eq!(p.0[4095], i as u8);
    }
    let bigs: Vec<Box<Big>> = (0..8).map(|i| Box::new(Big([i; 100]))).collect();
    for (i, b) in bigs.iter().enumerate() {
        assert_eq!(&**b as *const Big as usize % 65536, 0);
        assert_eq!(b.0[99], i as u8);
    }
    // 2 MiB alignment, small size (alignment above the size)
    unsafe {
        let l = Layout::from_size_align(24, 2 << 20).unwrap();
        let p = alloc(l);
        assert!(!p.is_null() && p as usize % (2 << 20) == 0);
        p.write_bytes(0xab, 24);
        dealloc(p, l);
    }
}

#[test]
fn realloc_keeps_large_alignment() {
    for &align in &[32usize, 256, 8192, 1 << 20] {
        unsafe {
            let l = Layout::from_size_align(100, align).unwrap();
            let p = alloc(l);
            assert!(!p.is_null() && p as usize % align == 0);
            for i in 0..100 {
                *p.add(i) = i as u8;
            }
            let q = realloc(p, l, 3 << 20); // grow into the large lane
            assert!(!q.is_null() && q as usize % align == 0, "align {}", align);
            for i in 0..100 {
                assert_eq!(*q.add(i), i as u8);
            }
            q.add((3 << 20) - 1).write(9);
            let l2 = Layout::from_size_align(3 << 20, align).unwrap();
            let r = realloc(q, l2, 40); // and shrink, below the alignment
            assert!(!r.is_null() && r as usize % align == 0, "align {} after shrinking", align);
            for i in 0..40 {
                assert_eq!(*r.add(i), i as u8);
            }
            dealloc(r, Layout::from_size_align(40, align).unwrap());
        }
    }
}

#[test]
fn zeroed() {
    let v = vec![0u8; 3 << 20];
    assert!(v.iter().all(|&b| b == 0));
    let w = vec![0u64; 1000];
    assert!(w.iter().all(|&b| b == 0));
    unsafe {
        // dirty a block, free it, and ask for zeroed memory of the same layout
        for &(size, align) in &[(200usize, 8usize), (200, 128), (5000, 4096)] {
            let l = Layout::from_size_align(size, align).unwrap();
            for _ in 0..4 {
                let p = alloc(l);
                p.write_bytes(0xff, size);
                dealloc(p, l);
                let z = alloc_zeroed(l);
                assert!(!z.is_null() && z as usize % align == 0);
                assert!((0..size).all(|i| *z.add(i) == 0), "size {} align {}", size, align);
                dealloc(z, l);
            }
        }
    }
}
