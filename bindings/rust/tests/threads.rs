//! Threads with hakmem as the global allocator: blocks dropped by threads
//! other than the one that allocated them, short-lived threads, scoped ones.
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;

use hakmem::HakMem;

#[global_allocator]
static GLOBAL: HakMem = HakMem;

#[test]
fn cross_thread_drops() {
    let (tx, rx) = mpsc::channel::<Vec<String>>();
    let producers: Vec<_> = (0..4)
        .map(|t| {
            let tx = tx.clone();
            thread::spawn(move || {
                for round in 0..200 {
                    let batch: Vec<String> = (0..100).map(|i| format!("{}-{}-{}", t, round, i)).collect();
                    tx.send(batch).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let mut n = 0usize;
    for batch in rx {
        // dropped here, on the consumer thread
        assert_eq!(batch.len(), 100);
        assert!(batch[99].ends_with("-99"));
        n += batch.len();
    }
    for p in producers {
        p.join().unwrap();
    }
    assert_eq!(n, 4 * 200 * 100);
}

#[test]
fn blocks_outlive_their_threads() {
    // each short-lived thread allocates; the main thread frees after it exited
    let mut kept: Vec<Box<[u64]>> = Vec::new();
    for round in 0..100u64 {
        let h = thread::spawn(move || (0..50u64).map(|i| vec![round * i; (i % 40 + 1) as usize].into_boxed_slice()).collect::<Vec<_>>());
        kept.extend(h.join().unwrap());
        if round % 10 == 9 {
            for b in &kept {
                assert!(b.iter().all(|&x| x == b[0]));
            }
            kept.clear();
        }
    }
}

#[test]
fn shared_map_under_a_lock() {
    let map: Arc<Mutex<HashMap<u32, Vec<u8>>>> = Arc::new(Mutex::new(HashMap::new()));
    thread::scope(|s| {
        for t in 0..4u32 {
            let map = Arc::clone(&map);
            s.spawn(move || {
                for i in 0..5000u32 {
                    let k = (i * 7 + t) % 3000;
                    let mut m = map.lock().unwrap();
                    if m.remove(&k).is_none() {
                        m.insert(k, vec![t as u8; (i % 500) as usize]); // freed later by any thread
                    }
                }
            });
        }
    });
    let m = map.lock().unwrap();
    for v in m.values() {
        assert!(v.iter().all(|&x| x == v.first().copied().unwrap_or(0)));
    }
}
