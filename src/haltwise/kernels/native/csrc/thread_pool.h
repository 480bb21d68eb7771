// The native kernels' work-sharing pool: parallel_chunks(begin, end, grain, fn) is a drop-in for
// at::parallel_for that survives a shared host.
//
// at::parallel_for (torch's OpenMP team) ends every region at a barrier that waits for every thread
// to arrive; when another process holds one core, the descheduled thread arrives a whole scheduler
// slice late, at every one of a decode step's ~150 regions (256 -> 3 tok/s measured). Here instead:
//
//   caller:  publish job --> claim chunks from one atomic counter --> wait until every chunk is DONE
//   workers: (spin ~200 us, then sleep on a futex) --> claim chunks of the open job --> back to waiting
//
// The call returns as soon as every chunk has run, never waiting for a worker to arrive: a worker
// that was not scheduled in time finds no chunk left, and its share was taken by the running threads.
// A worker descheduled *inside* a chunk is still waited for: chunks are kept small (~16 per thread),
// and a wait of over 1 ms sends the next 20 ms of calls to the caller alone (a late thread means a
// busy core; fewer threads while it lasts).
//
// INVARIANT (determinism, SPEC 11): fn(b, e) must compute each output element from its index alone,
// with a fixed reduction order, so that results never depend on which thread ran a chunk or where
// the chunk boundaries fell (they vary with the thread count). Never split a reduction across chunks.
#pragma once
#include <stdint.h>

namespace haltwise_native {

using ChunkFn = void (*)(const void* ctx, int64_t b, int64_t e);

// Multiply-adds a chunk of a linear or of attention should hold at least: handing a chunk to another
// thread costs ~microseconds, so a step's small pieces (a 1-row decode's projections, a short context's
// heads) run on the caller rather than in slivers.
constexpr int64_t kMinChunkWork = 1 << 20;

// Runs fn over [begin, end) in chunks of at least `grain` indices; every index exactly once.
// Inline on the calling thread when the pool has 1 thread, the range is one chunk, the caller is a
// pool worker (nested call), or another thread is using the pool. Rethrows the first exception.
void run_chunks(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, const void* ctx);

template <class F>
void parallel_chunks(int64_t begin, int64_t end, int64_t grain, const F& f) {
  run_chunks(begin, end, grain, [](const void* c, int64_t b, int64_t e) { (*static_cast<const F*>(c))(b, e); }, &f);
}

// Threads the next run_chunks call may use, the caller included: set_pool_threads(n) if n > 0 was
// set, else torch's intra-op count (at::get_num_threads(), so torch.set_num_threads applies).
int pool_threads();
void set_pool_threads(int n);  // 0 = follow torch again

// Index of the calling thread inside a chunk: 0 for the caller, 1..pool_threads()-1 for workers.
// Per-thread scratch sized pool_threads() before the call may be indexed with it.
int pool_thread_index();

// Test hooks. hold(1): worker 1 parks when woken for a job, before claiming any chunk, until hold(0)
// (or 10 s pass), as if descheduled; hold(2): it parks 100 ms inside each chunk it claims. held():
// whether it is parked now. chunks_run(i): chunks run by thread index i since the last hold().
// late_events(): calls whose caller waited for a late worker (each starts a caller-only spell);
// solo_ms(): the last such spell's length (20 ms, doubling while the worker keeps being late).
// use_torch(true): run_chunks defers to at::parallel_for (the reference the pool is tested against).
void pool_debug_hold(int mode);
int64_t pool_debug_late_events();
double pool_debug_solo_ms();
void pool_debug_use_torch(bool on);
bool pool_debug_held();
int64_t pool_debug_chunks_run(int index);

}  // namespace haltwise_native
