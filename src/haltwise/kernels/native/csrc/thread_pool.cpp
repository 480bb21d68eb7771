// thread_pool.h's pool. One job is open at a time; its chunks are claimed from one 64-bit word:
//
//     claim_ = epoch (high 32 bits) | next chunk (low 32 bits; CLOSED while the job's fields change)
//
// A thread claims chunk i by compare-exchanging (epoch, i) -> (epoch, i + 1) after reading the job's
// fields. The caller closes the word (new epoch, CLOSED) before rewriting the fields and opens it
// after, so a successful claim proves the fields it read belong to the claimed epoch: a worker that
// slept through any number of jobs can never run a chunk twice or with another job's function.
// done_ counts finished chunks of the open job; it is reset only once every chunk is done.
#include "thread_pool.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace haltwise_native {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t CLOSED = 0xFFFFFFFFu;
constexpr int MAX_THREADS = 256;
constexpr int CHUNKS_PER_THREAD = 16;   // balance and slack for a late thread (16 vs 4: Qwen's 32-row linears ~1.3x)
// Spin before sleeping: a worker ~200 us after its last chunk (decode steps are ms apart), the caller
// ~50 us for the last chunk to end. HALTWISE_POOL_SPIN_US=worker[,caller] overrides (measurement only).
std::chrono::microseconds spin_us(int which, int fallback) {
  const char* env = std::getenv("HALTWISE_POOL_SPIN_US");
  if (!env) return std::chrono::microseconds(fallback);
  const char* comma = std::strchr(env, ',');
  return std::chrono::microseconds(std::atoi(which == 0 ? env : comma ? comma + 1 : env));
}
const auto WORKER_SPIN = spin_us(0, 200);
const auto CALLER_SPIN = spin_us(1, 50);
// A worker descheduled inside a chunk makes the caller wait a scheduler slice. When the wait after the
// caller's own last chunk exceeds LATE_WAIT and 4x its mean chunk time, the next SOLO of calls run on
// the caller alone, then workers are tried again (issue 26: "fewer threads while it lasts"). A worker
// late again within RECENT spells of the last spell's end means the busy core is still busy: the spell
// doubles, up to MAX_SOLO, so a lasting neighbour costs one wait a spell rather than one every 20 ms.
// RECENT is 1: a busy loop makes the worker late at the first call after a spell, while a neighbour that
// runs in bursts (a load client parsing 32 streams after each step) is late again tens of ms later; with
// RECENT 4 that one too doubled its spells to 320 ms, and the worker sat idle 63% of a Gemma 32-client
// load (server 429 vs 486 tok/s with RECENT 1, medians of 3, alternating; beside a busy loop the same).
// HALTWISE_POOL_SOLO=first_ms,longest_ms,recent overrides the spells (measurement only; 0 never goes alone).
int solo_setting(int which, int fallback) {
  const char* at = std::getenv("HALTWISE_POOL_SOLO");
  for (int i = 0; at && i < which; ++i) {
    at = std::strchr(at, ',');
    if (at) ++at;
  }
  return at ? std::atoi(at) : fallback;
}
constexpr auto LATE_WAIT = std::chrono::microseconds(1000);
const auto SOLO = std::chrono::milliseconds(solo_setting(0, 20));
const auto MAX_SOLO = std::max(SOLO, std::chrono::milliseconds(solo_setting(1, 320)));
const int RECENT = solo_setting(2, 1);

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Sleep while *word == expected (spurious wake-ups allowed); wake every sleeper on word.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
#else
  word.wait(expected);
#endif
}
void futex_wake(std::atomic<uint32_t>& word) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
#else
  word.notify_all();
#endif
}

thread_local int tl_index = 0;       // pool_thread_index()
thread_local bool tl_inside = false;  // a pool worker, or a caller inside its own job: nested calls run inline

class Pool {
 public:
  void run(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, const void* ctx) {
    const int64_t n = end - begin;
    if (n <= 0) return;
    const int threads = std::clamp(pool_threads(), 1, MAX_THREADS);
    grain = std::max<int64_t>(grain, 1);
    const int64_t chunk = std::max(grain, (n + threads * CHUNKS_PER_THREAD - 1) / (threads * CHUNKS_PER_THREAD));
    const int64_t chunks = (n + chunk - 1) / chunk;
    std::unique_lock<std::mutex> owner(mutex_, std::defer_lock);
    if (threads == 1 || chunks == 1 || tl_inside || !owner.try_lock()) {
      fn(ctx, begin, end);
      return;
    }
    const auto start = Clock::now();
    if (start < solo_until_) {
      fn(ctx, begin, end);
      return;
    }
    spawn(threads - 1);
    error_ = nullptr;
    tl_inside = true;
    const uint32_t epoch = ++epoch_;
    claim_.store(uint64_t(epoch) << 32 | CLOSED, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);  // pairs with help()'s acquire fence
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    begin_.store(begin, std::memory_order_relaxed);
    end_.store(end, std::memory_order_relaxed);
    chunk_.store(chunk, std::memory_order_relaxed);
    chunks_.store((uint32_t)chunks, std::memory_order_relaxed);
    threads_.store(threads, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    claim_.store(uint64_t(epoch) << 32, std::memory_order_release);  // open
    gen_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake(gen_);
    const int64_t mine = help(0);
    const auto own_done = Clock::now();
    wait_done((uint32_t)chunks);
    const auto waited = Clock::now() - own_done;
    if (SOLO.count() > 0 && waited > LATE_WAIT && waited > 4 * (own_done - start) / std::max<int64_t>(mine, 1)) {
      spell_ = own_done - solo_until_ < RECENT * spell_ ? std::min<Clock::duration>(2 * spell_, MAX_SOLO) : SOLO;
      solo_until_ = own_done + waited + spell_;
      late_events_.fetch_add(1, std::memory_order_relaxed);
    }
    tl_inside = false;
    if (error_) std::rethrow_exception(error_);
  }

  void hold(int mode) {
    for (auto& c : chunks_run_) c.store(0);
    hold_.store(mode);
  }
  int64_t late_events() const { return late_events_.load(); }
  double solo_ms() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::chrono::duration<double, std::milli>(spell_).count();
  }
  bool held() const { return held_.load(); }
  int64_t chunks_run(int i) const { return i >= 0 && i < MAX_THREADS ? chunks_run_[i].load() : 0; }

  std::atomic<int> override_{0};
  std::atomic<bool> use_torch_{false};

 private:
  // Claims and runs chunks of the open job until none is left (or the job is not for this index);
  // returns how many it ran.
  int64_t help(int index) {
    for (int64_t ran = 0;; ++ran) {
      uint64_t word = claim_.load(std::memory_order_acquire);
      const uint32_t next = (uint32_t)word;
      if (next == CLOSED) return ran;
      const ChunkFn fn = fn_.load(std::memory_order_relaxed);
      const void* ctx = ctx_.load(std::memory_order_relaxed);
      const int64_t begin = begin_.load(std::memory_order_relaxed), end = end_.load(std::memory_order_relaxed);
      const int64_t chunk = chunk_.load(std::memory_order_relaxed);
      const uint32_t chunks = chunks_.load(std::memory_order_relaxed);
      const int threads = threads_.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);  // a field from a newer job => the CAS fails
      if (next >= chunks || index >= threads) return ran;
      if (!claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        --ran;
        continue;
      }
      if (index == 1 && hold_.load() == 2) park();
      const int64_t b = begin + (int64_t)next * chunk;
      try {
        fn(ctx, b, std::min(end, b + chunk));
      } catch (...) {
        std::lock_guard<std::mutex> guard(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      chunks_run_[index].fetch_add(1, std::memory_order_relaxed);
      if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == chunks && caller_sleeping_.load(std::memory_order_seq_cst))
        futex_wake(done_);
    }
  }

  void wait_done(uint32_t chunks) {
    const auto until = Clock::now() + CALLER_SPIN;
    for (int i = 0; done_.load(std::memory_order_acquire) != chunks; ++i) {
      if ((i & 63) == 0 && Clock::now() > until) {
        caller_sleeping_.store(true, std::memory_order_seq_cst);
        for (uint32_t d; (d = done_.load(std::memory_order_seq_cst)) != chunks;) futex_wait(done_, d);
        caller_sleeping_.store(false, std::memory_order_relaxed);
        break;
      }
      cpu_relax();
    }
  }

  void spawn(int workers) {
    for (; spawned_ < workers; ++spawned_) std::thread([this, index = spawned_ + 1] { work(index); }).detach();
  }

  void work(int index) {
    tl_index = index;
    tl_inside = true;
    uint32_t seen = gen_.load(std::memory_order_acquire);
    for (;;) {
      const auto until = Clock::now() + WORKER_SPIN;
      for (int i = 0; gen_.load(std::memory_order_acquire) == seen; ++i) {
        if ((i & 63) == 0 && Clock::now() > until) {
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          if (gen_.load(std::memory_order_seq_cst) == seen) futex_wait(gen_, seen);
          sleepers_.fetch_sub(1, std::memory_order_relaxed);
        }
        cpu_relax();
      }
      seen = gen_.load(std::memory_order_acquire);
      if (index == 1 && hold_.load() == 1) park();
      help(index);
    }
  }

  void park() {  // the test hook: behave like a worker the scheduler left out
    held_.store(true);
    const auto until = Clock::now() + (hold_.load() == 2 ? std::chrono::milliseconds(100) : std::chrono::seconds(10));
    while (hold_.load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    held_.store(false);
  }

  std::mutex mutex_;                     // one caller at a time; others run inline
  int spawned_ = 0;                      // workers 1..spawned_ exist (they never exit)
  uint32_t epoch_ = 0;
  std::atomic<uint64_t> claim_{CLOSED};
  std::atomic<ChunkFn> fn_{nullptr};
  std::atomic<const void*> ctx_{nullptr};
  std::atomic<int64_t> begin_{0}, end_{0}, chunk_{1};
  std::atomic<uint32_t> chunks_{0};
  std::atomic<int> threads_{1};
  std::atomic<uint32_t> done_{0};        // futex word: finished chunks of the open job
  std::atomic<uint32_t> gen_{0};         // futex word: bumped when a job opens
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  std::atomic<int> hold_{0};             // test hook mode: 0 off, 1 park before claiming, 2 inside a chunk
  std::atomic<bool> held_{false};
  Clock::time_point solo_until_{};       // (under mutex_) calls before this run on the caller alone
  Clock::duration spell_ = SOLO;         // (under mutex_) the last caller-alone spell's length
  std::atomic<int64_t> late_events_{0};
  std::atomic<int64_t> chunks_run_[MAX_THREADS] = {};
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: detached workers may outlive static destruction
  return *p;
}

}  // namespace

void run_chunks(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, const void* ctx) {
  if (pool().use_torch_.load(std::memory_order_relaxed)) {
    at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { fn(ctx, b, e); });
    return;
  }
  pool().run(begin, end, grain, fn, ctx);
}

int pool_threads() {
  const int n = pool().override_.load();
  return n > 0 && !pool().use_torch_.load() ? n : at::get_num_threads();
}

void set_pool_threads(int n) { pool().override_.store(std::max(n, 0)); }
int pool_thread_index() { return pool().use_torch_.load(std::memory_order_relaxed) ? at::get_thread_num() : tl_index; }
void pool_debug_hold(int mode) { pool().hold(mode); }
int64_t pool_debug_late_events() { return pool().late_events(); }
double pool_debug_solo_ms() { return pool().solo_ms(); }
void pool_debug_use_torch(bool on) { pool().use_torch_.store(on); }
bool pool_debug_held() { return pool().held(); }
int64_t pool_debug_chunks_run(int index) { return pool().chunks_run(index); }

}  // namespace haltwise_native
