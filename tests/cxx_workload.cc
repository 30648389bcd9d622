// A C++ program of our own for the LD_PRELOAD tests: std::map /
// unordered_map / vector / string churn across 4 std::threads with objects
// handed between threads.  Its output is deterministic (it depends only on
// the computation, never on scheduling or addresses), so a run under
// LD_PRELOAD=libhakmem.so must print exactly what a plain run prints.
//   cxx_workload [ROUNDS]
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

static uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A queue of heap objects passed from thread i to thread (i+1)%4.
struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<std::vector<std::string>>> q;
  bool closed = false;
};

static uint64_t fnv(const std::string &s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct Result {
  uint64_t map_hash = 0, umap_count = 0, received_hash = 0, received_items = 0, longest = 0;
};

static void worker(int id, int rounds, Mailbox *in, Mailbox *out, Result *res) {
  std::map<std::string, std::vector<int>> m;
  std::unordered_map<uint64_t, std::string> um;
  uint64_t seed = static_cast<uint64_t>(id) * 1000003u;
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < 2000; i++) {
      uint64_t x = mix(seed++);
      std::string key = "k" + std::to_string(x % 5000);
      auto &v = m[key];
      v.push_back(static_cast<int>(x % 1000));
      if (v.size() > 40) v.erase(v.begin(), v.begin() + 20);
      um[x % 20000] = std::string(static_cast<size_t>(x % 200), static_cast<char>('a' + x % 26));
      if (x % 7 == 0) um.erase((x >> 8) % 20000);
      if (x % 101 == 0) m.erase(m.begin(), std::next(m.begin(), static_cast<long>(std::min<size_t>(m.size(), 50))));
    }
    // send a batch of strings to the next thread
    auto batch = std::make_unique<std::vector<std::string>>();
    for (int k = 0; k < 200; k++) {
      uint64_t x = mix(seed++);
      batch->push_back(std::string(static_cast<size_t>(x % 3000), static_cast<char>('A' + x % 26)) +
                       std::to_string(id));
    }
    {
      std::lock_guard<std::mutex> g(out->mu);
      out->q.push_back(std::move(batch));
    }
    out->cv.notify_one();
    // receive one batch (from the previous thread) and consume it
    std::unique_ptr<std::vector<std::string>> got;
    {
      std::unique_lock<std::mutex> g(in->mu);
      in->cv.wait(g, [&] { return !in->q.empty(); });
      got = std::move(in->q.front());
      in->q.pop_front();
    }
    for (auto &s : *got) {
      res->received_hash ^= fnv(s) + res->received_items * 0x9E3779B97F4A7C15ull;
      res->received_items++;
      res->longest = std::max<uint64_t>(res->longest, s.size());
    }
  }
  for (auto &kv : m) {
    res->map_hash = fnv(kv.first, res->map_hash);
    for (int x : kv.second) res->map_hash = (res->map_hash ^ static_cast<uint64_t>(x)) * 1099511628211ull;
  }
  res->umap_count = um.size();
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 60;
  Mailbox boxes[4];
  Result res[4];
  std::vector<std::thread> th;
  for (int i = 0; i < 4; i++) th.emplace_back(worker, i, rounds, &boxes[i], &boxes[(i + 1) % 4], &res[i]);
  for (auto &t : th) t.join();
  std::ostringstream os;
  for (int i = 0; i < 4; i++)
    os << "thread " << i << ": map " << std::hex << res[i].map_hash << std::dec << " umap " << res[i].umap_count
       << " received " << res[i].received_items << " hash " << std::hex << res[i].received_hash << std::dec
       << " longest " << res[i].longest << "\n";
  std::cout << os.str();
  // some single-threaded string/sort work as well
  std::vector<std::string> words;
  for (uint64_t i = 0; i < 200000; i++) words.push_back(std::to_string(mix(i) % 1000000007));
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  std::cout << "unique words " << words.size() << " first " << words.front() << " last " << words.back() << "\n";
  std::cerr << "cxx_workload done\n";
  return 0;
}
