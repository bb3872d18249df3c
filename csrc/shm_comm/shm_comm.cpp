// Shared-memory all-reduce (sum) for the ranks of one node. No libtorch: tensors arrive
// as raw addresses, validated first by accel/comm.py.
//
// Safety by construction:
// - the segment is anonymous (memfd_create): it never has a name in /dev/shm, so however
//   and whenever ranks die, nothing is left behind. Peers open it through rank 0's
//   /proc/<pid>/fd/<fd> (the kernel allows that to the same user only), and rank 0 closes
//   its descriptor once all have mapped it; the memory goes when the last mapping does;
// - attaching checks a magic number, the session id and the world size;
// - every call first publishes, per rank, its size and dtype and whether its tensor can go
//   through shared memory: a mismatch is an error on every rank, and if any rank cannot,
//   every rank returns false and the caller uses torch.distributed on all ranks alike, so
//   ranks never wait in different places;
// - every wait checks the peers' pids (a dead peer is reported at once) and a deadline
//   (a hung peer is reported after `timeout` seconds) instead of spinning forever;
// - the barriers that settle a step (every rank announced; every rank finished reading)
//   are gates: one shared word per step that ranks enter with a compare-and-swap, and that
//   a rank giving up (timeout, dead peer) marks failed with one too. Either every rank gets
//   through or none does: a late peer finds the step failed and touches nothing, so no
//   rank writes into (or reads from) another rank's memory after that rank was told the
//   step failed. A rank still writing into its peers' pooled tensors is waited for past
//   the timeout (its work needs no other rank) unless it exits;
// - sums run in rank order, in fp32 (small messages: every rank sums everything; large
//   ones: each share is summed by one rank and copied by the others): all ranks get
//   identical results;
// - each rank also has a pool in the segment that tensors can live in (allocate()). When
//   every rank's tensor of an all-reduce is in its pool, each rank sums its share straight
//   from the peers' tensors into all of them: each byte is read and written once, with no
//   copy through the slots. A peer's tensor is read only at the offset that peer announced
//   for this call, checked against the bounds of that peer's pool.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../common/bindings.h"
#include "../common/convert.h"
#include "../common/simd.h"
#include "sum2_f32.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

constexpr size_t kPage = 4096;
constexpr uint64_t kMagic = 0x6163636c73686d35ull;  // "acclshm5" (gates; Control gained stopped)
// The largest segment this code maps: half of x86-64's 47-bit user address space. Sizes
// beyond it cannot be mapped anyway, and checking against it keeps every offset sum far
// from overflowing.
constexpr uint64_t kMaxSegmentBytes = uint64_t{1} << 46;
// A gate word: the low 32 bits of its step in the high half, then the rank that failed it
// (15 bits), the failed flag, and how many ranks have entered (16 bits).
constexpr uint64_t kGateCount = 0xffff;
constexpr uint64_t kGateFailed = uint64_t{1} << 16;
constexpr int kGateFailerShift = 17;
constexpr int kMaxWorld = 0x7fff;  // what a gate word can count and name
// Calls from this many elements on split the arithmetic across the ranks (reduce_share);
// smaller ones are latency-bound, and the extra barrier would cost more than it saves.
// Where the split starts to win was measured with both paths alternating in one job, 2
// ranks, and is the same at x86-64-v4 and v3 (docs/benchmarks.md, "How the segment
// sums"): fp32 from 160-192 KiB, where an element is one addition; bf16 and fp16 from
// 8 KiB, where an element also costs two conversions and a rounding.
constexpr int64_t kSplitElementsF32 = 48 << 10;  // 192 KiB
constexpr int64_t kSplitElements16 = 4 << 10;    // 8 KiB

int64_t split_elements(int dtype) { return dtype == accel::kFloat32 ? kSplitElementsF32 : kSplitElements16; }

// Element types the segment cannot sum, named so that ranks can still compare what they
// pass: codes kOtherBase + i. A rank whose tensor cannot use the segment (one of these, or
// not on the CPU) announces it, and all ranks fall back to torch.distributed together.
constexpr int kOtherBase = 100;
constexpr const char* kOtherDTypes[] = {"float64", "int64", "int32", "int16", "int8", "uint8",
                                        "bool", "complex64", "complex128"};
constexpr int kOtherCount = sizeof(kOtherDTypes) / sizeof(kOtherDTypes[0]);
constexpr int kUnknownDType = kOtherBase + kOtherCount;  // any dtype in neither table

bool is_wire_dtype(int code) { return accel::is_dtype(code) || (code >= kOtherBase && code <= kUnknownDType); }

std::string wire_name(int code) {
  if (accel::is_dtype(code)) return accel::dtype_name(code);
  if (code >= kOtherBase && code < kUnknownDType) return kOtherDTypes[code - kOtherBase];
  return "a dtype accel.comm does not name";
}
using accel::kBFloat16;
using accel::kFloat16;
using accel::kFloat32;

struct alignas(64) Control {
  std::atomic<uint64_t> arrived;   // last call sequence whose chunk this rank published
  std::atomic<uint64_t> consumed;  // last sequence this rank finished reading
  std::atomic<uint64_t> reduced;   // last sequence whose share this rank has summed
  // The call's element count and dtype, per buffer parity: a rank that runs ahead into
  // its next call writes the other parity, never the one a slower peer is checking.
  uint64_t numel[2];
  int32_t dtype[2];
  int32_t eligible[2];  // 0: this rank's tensor cannot use the segment (see all_reduce)
  int32_t op[2];        // which collective (Op): ranks in different collectives is an error
  int32_t root[2];      // broadcast's source rank (0 for the others)
  int64_t offset[2];    // where this rank's tensor starts in its pool; -1: not in the pool
  std::atomic<uint64_t> stopped;  // the step this rank left after an error (0: none)
};

// The barriers that are gates (Header::gates).
enum Gate : int { kArrivedGate = 0, kReducedGate = 1 };

// The collectives, as announced in Control::op.
enum Op : int32_t { kAllReduce = 1, kAllGather = 2, kBroadcast = 3, kBarrier = 4, kReduceScatter = 5 };

const char* op_name(int32_t op) {
  switch (op) {
    case kAllReduce: return "all_reduce";
    case kAllGather: return "all_gather";
    case kBroadcast: return "broadcast";
    case kBarrier: return "barrier";
    case kReduceScatter: return "reduce_scatter";
    default: return "an unknown collective";
  }
}

struct alignas(64) Header {
  std::atomic<uint64_t> magic;  // stored last by the creator: attachers see a complete header
  uint64_t session;
  uint32_t world;
  uint64_t slot_bytes;
  uint64_t pool_bytes;
  // Per gate kind (Gate) and step parity: a rank at step s can only meet s - 2's word,
  // never s + 2's (begin_step waits until every rank has left s - 2).
  std::atomic<uint64_t> gates[2][2];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");

// --------------------------------------------------------------- copies

// memcpy through vector registers. glibc's memcpy switches to `rep movsb` between 2 KiB
// and 1 MiB (its rep_movsb_threshold and _stop_threshold), the sizes of most slot copies,
// and `rep movsb` is slow on some AMD CPUs (docs/benchmarks.md, "How the segment sums").
// (The optimize attribute stops gcc from turning the loop back into a memcpy call.)
ACCEL_KERNEL_BODY void copy_bytes_body(void* __restrict out, const void* __restrict in, size_t n) {
  char* to = static_cast<char*>(out);
  const char* from = static_cast<const char*>(in);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) std::memcpy(to + i, from + i, 64);  // inlined as vector moves
  for (; i < n; ++i) to[i] = from[i];
}
ACCEL_DISPATCHED_WITH(__attribute__((optimize("no-tree-loop-distribute-patterns"))), copy_bytes,
                      (void* __restrict out, const void* __restrict in, size_t n), (out, in, n))

// --------------------------------------------------------------- sums

ACCEL_KERNEL_BODY void add_f32_body(float* __restrict out, const float* __restrict a, const float* __restrict b,
                                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
ACCEL_DISPATCHED(add_f32, (float* __restrict out, const float* __restrict a, const float* __restrict b, int64_t n),
                 (out, a, b, n))

ACCEL_KERNEL_BODY void accumulate_f32_body(float* __restrict out, const float* __restrict a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += a[i];
}
ACCEL_DISPATCHED(accumulate_f32, (float* __restrict out, const float* __restrict a, int64_t n), (out, a, n))

// out = ((slot_0 + slot_1) + slot_2) + ...: the same order on every rank, so every rank
// gets the same bits.
void sum_f32(float* out, const float* const* slots, int world, int64_t n) {
  if (world == 1) {
    copy_bytes(out, slots[0], static_cast<size_t>(n) * sizeof(float));
    return;
  }
  add_f32(out, slots[0], slots[1], n);
  for (int r = 2; r < world; ++r) accumulate_f32(out, slots[r], n);
}

// Two fp32 terms, the common case of two ranks (sum2_f32.h).
using accel::sum2_f32_body;
// (The optimize attribute keeps gcc from turning the 32-byte copies into memcpy calls.)
ACCEL_DISPATCHED_WITH(__attribute__((optimize("no-tree-loop-distribute-patterns"))), sum2_f32,
                      (float* out, float* out2, const float* a, const float* b, int64_t n), (out, out2, a, b, n))

// sum_f32 for an `out` that may be one of the inputs: a block at a time through a buffer,
// each block written only after all of it was read (the kernels promise __restrict). A
// non-null `out2` gets the same values.
void sum_f32_blocked(float* out, float* out2, const float* const* slots, int world, int64_t n) {
  constexpr int64_t kBlock = 2048;
  alignas(64) float acc[kBlock];
  std::vector<const float*> block(world);
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t count = std::min(kBlock, n - begin);
    for (int r = 0; r < world; ++r) block[r] = slots[r] + begin;
    sum_f32(acc, block.data(), world, count);
    copy_bytes(out + begin, acc, static_cast<size_t>(count) * sizeof(float));
    if (out2 != nullptr) copy_bytes(out2 + begin, acc, static_cast<size_t>(count) * sizeof(float));
  }
}

// Two 16-bit terms, the common case of two ranks: one pass, summed in fp32 and rounded
// once, exactly as sum_half's blocks do (the same bits), without its float buffers.
// (No __restrict: out may be a or b, element for element.) This portable form serves the
// baseline level and other CPUs, for bf16 only: half.h's fp16 conversions do not
// vectorise inside this loop (gcc 12).
void sum2_bf16_portable(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = accel::float_to_bf16(accel::bf16_to_float(a[i]) + accel::bf16_to_float(b[i]));
}

// Whether sum2_half has a one-pass kernel for the dtype on this process's level.
bool has_sum2(int dtype) { return dtype == kBFloat16 || (dtype == kFloat16 && accel::isa() != accel::kBaseline); }

void sum2(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n, int dtype) {
#if ACCEL_X86_GCC
  namespace vec = accel::vec;
  if (accel::isa() == accel::kV4)
    return dtype == kBFloat16 ? vec::v4::add_rounded<kBFloat16>(out, a, b, n) : vec::v4::add_rounded<kFloat16>(out, a, b, n);
  if (accel::isa() == accel::kV3)
    return dtype == kBFloat16 ? vec::v3::add_rounded<kBFloat16>(out, a, b, n) : vec::v3::add_rounded<kFloat16>(out, a, b, n);
#endif
  sum2_bf16_portable(out, a, b, n);
}

// out (and a non-null out2) = a + b, for a dtype has_sum2 accepts; out may be a or b.
void sum2_half(uint16_t* out, uint16_t* out2, const uint16_t* a, const uint16_t* b, int64_t n, int dtype) {
  constexpr int64_t kBlock = 4096;
  for (int64_t begin = 0; begin < n; begin += kBlock) {  // blocks: out2 copied while in cache
    const int64_t count = std::min(kBlock, n - begin);
    sum2(out + begin, a + begin, b + begin, count, dtype);
    if (out2 != nullptr) copy_bytes(out2 + begin, out + begin, static_cast<size_t>(count) * sizeof(uint16_t));
  }
}

// The same in fp32 for bf16/fp16 inputs, a block at a time, rounded once at the end.
void sum_half(uint16_t* out, uint16_t* out2, const uint16_t* const* slots, int world, int64_t n, int dtype) {
  if (world == 2 && has_sum2(dtype)) return sum2_half(out, out2, slots[0], slots[1], n, dtype);
  constexpr int64_t kBlock = 2048;
  alignas(64) float acc[kBlock];
  alignas(64) float next[kBlock];
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t count = std::min(kBlock, n - begin);
    accel::to_f32(slots[0] + begin, acc, count, dtype);
    for (int r = 1; r < world; ++r) {
      accel::to_f32(slots[r] + begin, next, count, dtype);
      accumulate_f32(acc, next, count);
    }
    accel::from_f32(acc, out + begin, count, dtype);
    if (out2 != nullptr) copy_bytes(out2 + begin, out + begin, static_cast<size_t>(count) * sizeof(uint16_t));
  }
}

// Whether `pid` has exited. kill(pid, 0) still succeeds on a zombie (exited, not yet reaped
// by its parent), so the state letter in /proc/<pid>/stat is checked as well.
bool has_exited(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;  // no procfs: trust kill()
  char buffer[512];
  const ssize_t length = read(fd, buffer, sizeof buffer - 1);
  close(fd);
  if (length <= 0) return false;
  buffer[length] = '\0';
  const char* end_of_name = std::strrchr(buffer, ')');  // the name may contain spaces or ')'
  return end_of_name != nullptr && end_of_name[1] == ' ' && (end_of_name[2] == 'Z' || end_of_name[2] == 'X');
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The segment's mapping, shared by the communicator and the pool blocks handed out from
// it: a tensor in a pool keeps the memory mapped after its group is gone.
struct Mapping {
  char* base = nullptr;
  size_t size = 0;
  Mapping(char* where, size_t bytes) : base(where), size(bytes) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (base != nullptr) munmap(base, size);
  }
};

// This rank's pool: first fit over free ranges, neighbours merged when a block comes back.
// Blocks come back from Python's deallocator on any thread, hence the mutex. The pages a
// block touched stay with the pool until the segment is unmapped, as a caching allocator
// keeps them: taking the same sizes again costs no page faults.
class Pool {
 public:
  static constexpr uint64_t kAlign = 64;  // cache lines: shares never split one

  explicit Pool(uint64_t bytes) {
    if (bytes > 0) free_[0] = bytes;
  }

  // The offset of `bytes` (> 0) taken from the pool, or -1 when no free range fits.
  int64_t take(uint64_t bytes) {
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    std::lock_guard<std::mutex> hold(mutex_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      const uint64_t offset = it->first;
      const uint64_t left = it->second - bytes;
      free_.erase(it);
      if (left > 0) free_[offset + bytes] = left;
      return static_cast<int64_t>(offset);
    }
    return -1;
  }

  void give_back(uint64_t offset, uint64_t bytes) {
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    std::lock_guard<std::mutex> hold(mutex_);
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && offset + bytes == next->first) {  // merge with the range after
      bytes += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {  // and with the range before
      auto before = std::prev(next);
      if (before->first + before->second == offset) {
        before->second += bytes;
        return;
      }
    }
    free_[offset] = bytes;
  }

  uint64_t free_bytes() {
    std::lock_guard<std::mutex> hold(mutex_);
    uint64_t total = 0;
    for (const auto& range : free_) total += range.second;
    return total;
  }

 private:
  std::mutex mutex_;
  std::map<uint64_t, uint64_t> free_;  // offset -> size
};

// Bytes of a rank's pool, exposed to Python through the buffer protocol (torch.frombuffer
// keeps the block, and so the mapping, alive as long as the tensor); back to the pool when
// Python drops it.
class PoolBlock {
 public:
  PoolBlock(std::shared_ptr<Mapping> mapping, std::shared_ptr<Pool> pool, char* data, uint64_t offset, uint64_t bytes)
      : mapping_(std::move(mapping)), pool_(std::move(pool)), data_(data), offset_(offset), bytes_(bytes) {}
  PoolBlock(const PoolBlock&) = delete;
  PoolBlock& operator=(const PoolBlock&) = delete;
  ~PoolBlock() { pool_->give_back(offset_, bytes_); }

  char* data() const { return data_; }
  uint64_t nbytes() const { return bytes_; }
  uint64_t offset() const { return offset_; }

 private:
  std::shared_ptr<Mapping> mapping_;
  std::shared_ptr<Pool> pool_;
  char* data_;
  uint64_t offset_;
  uint64_t bytes_;
};

class Communicator {
 public:
  // create: a new anonymous segment (rank 0); else attach to `path`, rank 0's
  // /proc/<pid>/fd/<fd> of it.
  Communicator(const std::string& path, bool create, int rank, int world, uint64_t slot_bytes,
               uint64_t session, std::vector<int64_t> pids, uint64_t pool_bytes)
      : rank_(rank), world_(world), pids_(std::move(pids)) {
    if (world < 1 || world > kMaxWorld) throw std::invalid_argument("world must be in [1, " + std::to_string(kMaxWorld) + "]");
    if (rank < 0 || rank >= world) throw std::invalid_argument("rank must be in [0, world)");
    if (static_cast<int>(pids_.size()) != world) throw std::invalid_argument("pids must have one entry per rank");
    if (slot_bytes == 0 || slot_bytes % 64 != 0) throw std::invalid_argument("slot_bytes must be a positive multiple of 64");
    if (pool_bytes % kPage != 0) throw std::invalid_argument("pool_bytes must be a multiple of 4096");
    size_ = segment_bytes(world, slot_bytes, pool_bytes);  // checked: throws when too large
    // The pools start on a page, as tensors from torch's allocator of that size would.
    pools_at_ = size_ - static_cast<size_t>(world) * (pool_bytes + kPage);
    const int fd = create ? memfd_create("accel-shm-comm", MFD_CLOEXEC) : open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0)
      throw std::runtime_error(std::string(create ? "memfd_create" : "opening " + path) + " failed: " + std::strerror(errno));
    const auto fail = [&](const std::string& message) {
      close(fd);
      throw std::runtime_error(message);
    };
    if (create && ftruncate(fd, static_cast<off_t>(size_)) != 0)
      fail("sizing the shared segment failed: " + std::string(std::strerror(errno)));
    struct stat info;
    if (fstat(fd, &info) != 0) fail("fstat of the shared segment failed: " + std::string(std::strerror(errno)));
    if (static_cast<size_t>(info.st_size) != size_)
      fail("shared segment " + path + " has the wrong size: not this job's segment");
    void* base = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) fail("mmap of the shared segment failed: " + std::string(std::strerror(errno)));
    base_ = static_cast<char*>(base);
    mapping_ = std::make_shared<Mapping>(base_, size_);
    if (create) {
      fd_ = fd;  // kept open until every peer has mapped it (release())
      // Start the lifetime of the shared objects here (ftruncate zero-filled the bytes, but
      // atomics must be constructed to be used); attachers use the objects made here.
      Header* header = new (base_) Header{};
      for (int r = 0; r < world; ++r) new (&control(r)) Control{};
      header->session = session;
      header->world = static_cast<uint32_t>(world);
      header->slot_bytes = slot_bytes;
      header->pool_bytes = pool_bytes;
      header->magic.store(kMagic, std::memory_order_release);
    } else {
      close(fd);
      const Header* header = reinterpret_cast<const Header*>(base_);
      const uint64_t magic = header->magic.load(std::memory_order_acquire);
      if (magic != kMagic || header->session != session || header->world != static_cast<uint32_t>(world) ||
          header->slot_bytes != slot_bytes || header->pool_bytes != pool_bytes) {
        mapping_.reset();
        base_ = nullptr;
        throw std::runtime_error("shared segment " + path + " does not belong to this job (magic, session or size differ)");
      }
    }
    slot_bytes_ = slot_bytes;
    pool_bytes_ = pool_bytes;
    pool_ = std::make_shared<Pool>(pool_bytes);
  }

  ~Communicator() {
    if (fd_ >= 0) close(fd_);
  }

  // The segment's size for `world` ranks: header, controls, two slots per rank, then a
  // pool and a page of spacing per rank. Throws std::length_error when the sum would pass
  // kMaxSegmentBytes (it is computed so that it cannot overflow first).
  static uint64_t segment_bytes(int world, uint64_t slot_bytes, uint64_t pool_bytes) {
    if (world < 1 || world > kMaxWorld) throw std::invalid_argument("world must be in [1, " + std::to_string(kMaxWorld) + "]");
    const uint64_t ranks = static_cast<uint64_t>(world);
    const uint64_t limit = kMaxSegmentBytes;
    const uint64_t fixed = sizeof(Header) + ranks * sizeof(Control);
    const auto too_large = [&] {
      throw std::length_error("a shared segment for " + std::to_string(world) + " ranks with " +
                              std::to_string(slot_bytes) + "-byte slots and " + std::to_string(pool_bytes) +
                              "-byte pools would pass the limit of " + std::to_string(limit) + " bytes");
    };
    if (slot_bytes > limit / 4 / ranks || pool_bytes > limit / ranks) too_large();
    const uint64_t pools_at = (fixed + ranks * 2 * slot_bytes + kPage - 1) / kPage * kPage;  // < limit
    if (pool_bytes + kPage > (limit - pools_at) / ranks) too_large();
    return pools_at + ranks * (pool_bytes + kPage);
  }

  // `nbytes` (> 0) of this rank's pool, or None when no free range is large enough.
  std::unique_ptr<PoolBlock> allocate(int64_t nbytes) {
    if (nbytes <= 0) throw std::invalid_argument("nbytes must be > 0, got " + std::to_string(nbytes));
    const int64_t offset = pool_->take(static_cast<uint64_t>(nbytes));
    if (offset < 0) return nullptr;
    return std::make_unique<PoolBlock>(mapping_, pool_, pool(rank_) + offset, static_cast<uint64_t>(offset),
                                       static_cast<uint64_t>(nbytes));
  }

  uint64_t pool_bytes() const { return pool_bytes_; }
  uint64_t pool_free_bytes() const { return pool_->free_bytes(); }
  // How many calls of each collective went straight between pooled tensors, by name.
  std::map<std::string, uint64_t> pooled_calls() const {
    std::map<std::string, uint64_t> calls;
    for (const int32_t op : {kAllReduce, kAllGather, kBroadcast, kReduceScatter}) calls[op_name(op)] = pooled_calls_[op];
    return calls;
  }

  // Where peers open the segment (rank 0 only, before release()).
  std::string path() const {
    if (fd_ < 0) throw std::runtime_error("only the creating rank, before release(), has a path");
    return "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd_);
  }

  // Close rank 0's descriptor: every rank has mapped the segment, no one else may open it.
  void release() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  // Leave after an error outside the segment (the other level of a collective over
  // several nodes), as after an error inside it: this communicator is unusable from now
  // on, and a peer waiting for this rank at a step is told at once instead of waiting out
  // its timeout. The first failure's reason is the one later calls name.
  void stop(const std::string& reason) {
    if (broken_.empty()) broken_ = reason.empty() ? std::string("stopped") : reason;
    control(rank_).stopped.store(std::max<uint64_t>(sequence_, 1), std::memory_order_release);
  }

  // Sum `numel` elements of `dtype` at `data` across the ranks, in place. `eligible` false
  // says this rank's tensor cannot go through the segment (data is then not read). Every
  // rank first checks that all ranks pass the same numel and dtype (an error on every rank
  // otherwise); if any rank is not eligible, all return false, touching no data. When every
  // rank's tensor is in its pool, the sums go straight between the tensors (one step);
  // when only some are, every rank starts over on the staged path.
  bool all_reduce(uintptr_t data, int64_t numel, int dtype, bool eligible, double timeout) {
    check_usable("numel", numel, dtype, eligible, data, data);
    check_summable(dtype, eligible);
    const int64_t element = eligible ? accel::dtype_size(dtype) : 1;
    const int64_t offset = eligible ? pool_offset(data, numel * element) : -1;
    py::gil_scoped_release released;
    return guarded([&] {
      return pooled_or_staged(
          kAllReduce, numel, dtype, eligible, offset, numel * element, timeout,
          [&](uint64_t seq) { reduce_in_pools(seq, numel, dtype, timeout); },
          [&](bool may_meet_pooled) {
            return staged_all_reduce(data, numel, dtype, element, eligible, timeout, may_meet_pooled);
          });
    });
  }

  // Gather `nbytes` from every rank into `out` (rank r's bytes at r * nbytes), in rank
  // order. As all_reduce: ranks must agree on nbytes and dtype (an error on every rank
  // otherwise) and return false together, touching nothing, when any is not eligible.
  // When every rank's `data` is in its pool (and `out` is apart from it or has it as this
  // rank's block), each rank copies the others' bytes straight from their pools into
  // `out` in one step; when only some are, every rank starts over on the staged path.
  bool all_gather(uintptr_t data, uintptr_t out, int64_t nbytes, int dtype, bool eligible, double timeout) {
    check_usable("nbytes", nbytes, dtype, eligible, data, out);
    const bool apart = eligible && own_block_or_apart(out, data, nbytes);
    const int64_t offset = apart ? pool_offset(data, nbytes) : -1;
    py::gil_scoped_release released;
    return guarded([&] {
      return pooled_or_staged(
          kAllGather, nbytes, dtype, eligible, offset, nbytes, timeout,
          [&](uint64_t seq) { gather_from_pools(seq, reinterpret_cast<char*>(out), nbytes, timeout); },
          [&](bool may_meet_pooled) {
            return staged_all_gather(data, out, nbytes, dtype, eligible, timeout, may_meet_pooled);
          });
    });
  }

  // Copy `nbytes` at `data` from rank `root` to every rank (agreement as all_gather). When
  // the root's tensor is in its pool, the others copy straight from it in one step (only
  // the root's tensor decides: the others' are written, never read by a peer).
  bool broadcast(uintptr_t data, int64_t nbytes, int dtype, int root, bool eligible, double timeout) {
    if (root < 0 || root >= world_) throw std::invalid_argument("root must be in [0, world)");
    check_usable("nbytes", nbytes, dtype, eligible, data, data);
    const int64_t offset = eligible && rank_ == root ? pool_offset(data, nbytes) : -1;
    py::gil_scoped_release released;
    return guarded([&] {
      bool pooled = false;
      const bool done = for_each_chunk(nbytes, static_cast<int64_t>(slot_bytes_), eligible, timeout, [&](uint64_t seq, int64_t c, int64_t begin, int64_t count) {
        char* bytes = reinterpret_cast<char*>(data) + begin;
        if (rank_ == root && offset < 0 && count > 0) copy_bytes(buffer(rank_, seq), bytes, static_cast<size_t>(count));
        announce(seq, kBroadcast, nbytes, dtype, eligible, root, timeout, c == 0 ? offset : -1);
        if (c == 0 && !all_eligible(seq)) return finish_step(seq, false);
        if (c == 0 && control(root).offset[seq % 2] >= 0) {  // the root's tensor is in its pool
          const char* source = pool(root) + checked_offset(root, seq, nbytes);
          if (rank_ != root) copy_bytes(reinterpret_cast<char*>(data), source, static_cast<size_t>(nbytes));
          all_done_reading(seq, timeout);
          ++pooled_calls_[kBroadcast];
          pooled = true;
          return finish_step(seq, false);  // no more chunks
        }
        if (rank_ != root && count > 0) copy_bytes(bytes, buffer(root, seq), static_cast<size_t>(count));
        return finish_step(seq, true);
      });
      return done || pooled;
    });
  }

  // Sum block r of every rank's `data` (world blocks of `numel` elements) into rank r's
  // `out` (numel elements), in rank order. Each step carries a piece of every block: a
  // rank copies the pieces the others sum into its slot, then sums its own piece (its
  // term from `data`) into `out`; one barrier per step. Agreement as all_reduce. `out` may
  // be this rank's own block of `data`.
  //
  // When every rank's `data` is in its pool (and `out` is apart from it or its own
  // block), each rank sums its block straight from every rank's `data` into `out` in one
  // step; when only some are, every rank starts over on the staged path.
  bool reduce_scatter(uintptr_t data, uintptr_t out, int64_t numel, int dtype, bool eligible, double timeout) {
    check_usable("numel", numel, dtype, eligible, data, out);
    check_summable(dtype, eligible);
    const int64_t element = eligible ? accel::dtype_size(dtype) : 1;
    const int64_t block = numel * element;
    const bool apart = eligible && own_block_or_apart(data, out, block);
    const int64_t offset = apart ? pool_offset(data, world_ * block) : -1;
    py::gil_scoped_release released;
    return guarded([&] {
      return pooled_or_staged(
          kReduceScatter, numel, dtype, eligible, offset, world_ * block, timeout,
          [&](uint64_t seq) {
            // In rank order, as the staged path sums: the same bits.
            std::vector<const char*> terms(world_);
            for (int r = 0; r < world_; ++r) terms[r] = pool(r) + control(r).offset[seq % 2] + rank_ * block;
            sum_terms(reinterpret_cast<char*>(out), nullptr, terms, numel, dtype);
            all_done_reading(seq, timeout);
          },
          [&](bool may_meet_pooled) {
            return staged_reduce_scatter(data, out, numel, dtype, element, eligible, timeout, may_meet_pooled);
          });
    });
  }

  // Return once every rank has entered the barrier.
  void barrier(double timeout) {
    if (broken_.size()) throw std::runtime_error("this communicator failed earlier (" + broken_ + "); create a new process group");
    py::gil_scoped_release released;
    guarded([&] {
      const uint64_t seq = begin_step(timeout);
      announce(seq, kBarrier, 0, 0, true, 0, timeout);
      return finish_step(seq, true);
    });
  }

 private:
  // Checks every collective makes before touching memory.
  // (`size_name` names `size` in the error: "numel" or "nbytes".)
  void check_usable(const char* size_name, int64_t size, int dtype, bool eligible, uintptr_t data, uintptr_t out) {
    if (broken_.size()) throw std::runtime_error("this communicator failed earlier (" + broken_ + "); create a new process group");
    if (size < 0) throw std::invalid_argument(std::string(size_name) + " must be >= 0");
    if (!is_wire_dtype(dtype)) throw std::invalid_argument("dtype code " + std::to_string(dtype) + " is not one accel.comm knows");
    if (eligible && size > 0 && (data == 0 || out == 0)) throw std::invalid_argument("null tensor buffer");
  }

  // The reductions' extra check: an eligible rank's dtype must be one the segment sums.
  static void check_summable(int dtype, bool eligible) {
    if (eligible && !accel::is_dtype(dtype))
      throw std::invalid_argument(wire_name(dtype) + " cannot be summed in shared memory (float32, bfloat16, float16 can)");
  }

  // A collective that may go straight between pooled tensors: `offset` is where this
  // rank's tensor starts in its pool (-1: not there, or not eligible), `pooled_bytes` how
  // much of each rank's pool the pooled step reads. A rank that is not pooled goes to
  // `staged(true)` at once; a pooled rank announces, and if every rank is pooled runs
  // `pooled_step(seq)` (which ends with all_done_reading), else starts over with
  // `staged(false)`, as the staged ranks do when they meet its announcement.
  template <typename PooledStep, typename Staged>
  bool pooled_or_staged(int32_t op, int64_t size, int dtype, bool eligible, int64_t offset, int64_t pooled_bytes,
                        double timeout, PooledStep pooled_step, Staged staged) {
    if (offset < 0) return staged(true);
    const uint64_t seq = begin_step(timeout);
    announce(seq, op, size, dtype, eligible, 0, timeout, offset);
    if (!all_eligible(seq)) return finish_step(seq, false);
    if (all_pooled(seq, pooled_bytes)) {
      pooled_step(seq);
      ++pooled_calls_[op];
      return finish_step(seq, true);
    }
    finish_step(seq, true);  // a peer's tensor is not in its pool: all start over, staged
    return staged(false);
  }

  // Whether a staged collective ends at chunk `c` of step `seq`: at its first step, when a
  // rank is not eligible, or (`may_meet_pooled`) when a peer announced a pooled tensor,
  // which sets `peer_pooled` (the caller then starts over). Every rank reads the same
  // announcements, so all stop together.
  bool first_step_stops(uint64_t seq, int64_t c, bool may_meet_pooled, bool& peer_pooled) {
    if (c != 0) return false;
    if (!all_eligible(seq)) return true;
    peer_pooled = may_meet_pooled && any_pooled(seq);
    return peer_pooled;
  }

  // all_reduce through the slots, a chunk at a time. `may_meet_pooled`: this rank's tensor
  // is not in its pool, and a peer's may be (then every rank returns here to start over).
  bool staged_all_reduce(uintptr_t data, int64_t numel, int dtype, int64_t element, bool eligible, double timeout,
                         bool may_meet_pooled) {
    bool peer_pooled = false;
    const int64_t per_chunk = static_cast<int64_t>(slot_bytes_) / element;
    const bool done = for_each_chunk(numel, per_chunk, eligible, timeout, [&](uint64_t seq, int64_t c, int64_t begin, int64_t count) {
      char* slot = buffer(rank_, seq);
      char* tensor = reinterpret_cast<char*>(data) + begin * element;
      // Ranks agree on count and dtype (announce checks it), so they agree on the split.
      const bool split = count >= split_elements(dtype) && world_ > 1;
      if (split) {
        copy_other_shares(slot, tensor, count, element);
      } else if (count > 0) {
        copy_bytes(slot, tensor, static_cast<size_t>(count * element));
      }
      announce(seq, kAllReduce, numel, dtype, eligible, 0, timeout, -1);
      if (first_step_stops(seq, c, may_meet_pooled, peer_pooled)) return finish_step(seq, false);
      if (split) {
        // Each rank sums its own share of the elements (its tensor's part and the peers'
        // copies of it) into its tensor and its slot, then copies the peers' summed
        // shares from their slots: the arithmetic is done once, and every byte is
        // copied into and out of the segment once, not world times.
        reduce_share(tensor, seq, count, dtype);
        pass_gate(kReducedGate, &Control::reduced, seq, timeout, false);
        gather_other_shares(tensor, seq, count, element);
      } else if (count > 0) {
        reduce(tensor, seq, count, dtype);
      }
      return finish_step(seq, true);
    });
    if (peer_pooled) return staged_all_reduce(data, numel, dtype, element, eligible, timeout, false);
    return done;
  }

  // reduce_scatter through the slots. Each step carries a piece of every block: a rank
  // copies the pieces the others sum into its slot, then sums its own piece (its term
  // from `data`) into `out`; one barrier per step. `may_meet_pooled` as staged_all_reduce.
  bool staged_reduce_scatter(uintptr_t data, uintptr_t out, int64_t numel, int dtype, int64_t element, bool eligible,
                             double timeout, bool may_meet_pooled) {
    const char* input = reinterpret_cast<const char*>(data);
    const int64_t per_piece = static_cast<int64_t>(slot_bytes_) / (world_ * element);
    bool peer_pooled = false;
    const bool done = for_each_chunk(numel, per_piece, eligible, timeout, [&](uint64_t seq, int64_t c, int64_t begin, int64_t count) {
      char* slot = buffer(rank_, seq);
      for (int q = 0; q < world_ && count > 0; ++q)
        if (q != rank_)
          copy_bytes(slot + q * per_piece * element, input + (q * numel + begin) * element,
                     static_cast<size_t>(count * element));
      announce(seq, kReduceScatter, numel, dtype, eligible, 0, timeout);
      if (first_step_stops(seq, c, may_meet_pooled, peer_pooled)) return finish_step(seq, false);
      if (count > 0) {
        std::vector<const char*> terms(world_);
        for (int r = 0; r < world_; ++r)
          terms[r] = r == rank_ ? input + (rank_ * numel + begin) * element : buffer(r, seq) + rank_ * per_piece * element;
        sum_terms(reinterpret_cast<char*>(out) + begin * element, nullptr, terms, count, dtype);
      }
      return finish_step(seq, true);
    });
    if (peer_pooled) return staged_reduce_scatter(data, out, numel, dtype, element, eligible, timeout, false);
    return done;
  }

  // all_gather through the slots: each step, every rank copies a chunk of its bytes into
  // its slot and then every slot's chunk into `out`.
  bool staged_all_gather(uintptr_t data, uintptr_t out, int64_t nbytes, int dtype, bool eligible, double timeout,
                         bool may_meet_pooled) {
    bool peer_pooled = false;
    const bool done = for_each_chunk(nbytes, static_cast<int64_t>(slot_bytes_), eligible, timeout, [&](uint64_t seq, int64_t c, int64_t begin, int64_t count) {
      if (count > 0) copy_bytes(buffer(rank_, seq), reinterpret_cast<const char*>(data) + begin, static_cast<size_t>(count));
      announce(seq, kAllGather, nbytes, dtype, eligible, 0, timeout);
      if (first_step_stops(seq, c, may_meet_pooled, peer_pooled)) return finish_step(seq, false);
      for (int r = 0; r < world_ && count > 0; ++r)
        copy_bytes(reinterpret_cast<char*>(out) + r * nbytes + begin, buffer(r, seq), static_cast<size_t>(count));
      return finish_step(seq, true);
    });
    if (peer_pooled) return staged_all_gather(data, out, nbytes, dtype, eligible, timeout, false);
    return done;
  }

  // Whether `whole` (world_ blocks of `block` bytes) has `part` as this rank's block or
  // shares no byte with it: with any other overlap, writing `whole` could change `part`
  // while a peer still reads it from the pool.
  bool own_block_or_apart(uintptr_t whole, uintptr_t part, int64_t block) const {
    const uintptr_t whole_end = whole + static_cast<uintptr_t>(world_) * block;
    return part == whole + static_cast<uintptr_t>(rank_) * block || whole_end <= part || part + block <= whole;
  }

  // The offset rank r announced for step `seq`, checked to hold `bytes` inside its pool
  // (offsets come from other processes: checked before any is used).
  int64_t checked_offset(int r, uint64_t seq, int64_t bytes) {
    const int64_t offset = control(r).offset[seq % 2];
    if (offset < 0 || static_cast<uint64_t>(offset) > pool_bytes_ || static_cast<uint64_t>(bytes) > pool_bytes_ - offset)
      throw std::runtime_error("rank " + std::to_string(r) + " announced " + std::to_string(bytes) +
                               " bytes at offset " + std::to_string(offset) + " of its pool of " +
                               std::to_string(pool_bytes_) + " bytes");
    return offset;
  }

  // Say this rank has finished with the peers' pooled tensors in step `seq`, and wait
  // until every rank has: no rank may return (and let its caller reuse its tensor) while
  // another still reads or writes it. A live peer still at it is waited for past the
  // timeout (it passed the first gate, so it is copying or summing, which ends), since
  // its caller would otherwise be told the step failed while the peer still reads bytes
  // the caller may have changed, or writes into them.
  void all_done_reading(uint64_t seq, double timeout) {
    pass_gate(kReducedGate, &Control::reduced, seq, timeout, /*wait_for_live=*/true);
  }

  // Copy every peer's pooled bytes into its block of `out`, starting with the next rank's
  // (ranks read different pools at the same time); this rank's own block too, unless
  // `out` already holds it there.
  void gather_from_pools(uint64_t seq, char* out, int64_t nbytes, double timeout) {
    for (int i = 0; i < world_; ++i) {
      const int r = (rank_ + i) % world_;
      const char* source = pool(r) + control(r).offset[seq % 2];
      char* target = out + r * nbytes;
      if (source != target) copy_bytes(target, source, static_cast<size_t>(nbytes));
    }
    all_done_reading(seq, timeout);
  }

  // Where [data, data + bytes) starts in this rank's pool, or -1 when it is not all in it.
  int64_t pool_offset(uintptr_t data, int64_t bytes) {
    const uintptr_t start = reinterpret_cast<uintptr_t>(pool(rank_));
    if (bytes <= 0 || data < start || data - start > pool_bytes_ || static_cast<uint64_t>(bytes) > pool_bytes_ - (data - start))
      return -1;
    return static_cast<int64_t>(data - start);
  }

  // Rank r's pool starts r pages and r * 17 cache lines (mod a page) further than the pool
  // size alone would put it, so that no two ranks' pools are a large power of two apart:
  // ranks that allocate alike get tensors at the same offset in their pools, and two fp32
  // tensors exactly 1 GiB apart (the default pool) took 4-5x as long to all-reduce as the
  // same tensors 1 GiB + 5184 bytes apart, on an AMD EPYC (`benchmarks/pool_spacing.py`).
  char* pool(int rank) {
    const size_t skew = static_cast<size_t>(rank) * 17 * 64 % kPage;
    return base_ + pools_at_ + static_cast<size_t>(rank) * (pool_bytes_ + kPage) + skew;
  }

  // Whether every rank announced a tensor in its pool, each inside its pool's bounds (the
  // offsets come from other processes: checked before any is used).
  bool all_pooled(uint64_t seq, int64_t bytes) {
    for (int r = 0; r < world_; ++r)
      if (control(r).offset[seq % 2] < 0) return false;
    for (int r = 0; r < world_; ++r) checked_offset(r, seq, bytes);
    return true;
  }

  bool any_pooled(uint64_t seq) {
    for (int r = 0; r < world_; ++r)
      if (control(r).offset[seq % 2] >= 0) return true;
    return false;
  }

  // The pooled all-reduce: each rank sums its share straight from every rank's tensor (in
  // rank order, as the staged path does: the same bits) into every rank's tensor, then
  // waits until every share is written. Shares are disjoint, so no byte is written while
  // another rank may still read it.
  void reduce_in_pools(uint64_t seq, int64_t numel, int dtype, double timeout) {
    const auto [begin, end] = share(rank_, numel);
    if (end > begin) {
      const int64_t element = accel::dtype_size(dtype);
      const int64_t count = end - begin;
      std::vector<char*> shares(world_);
      std::vector<const char*> terms(world_);
      for (int r = 0; r < world_; ++r) {
        shares[r] = pool(r) + control(r).offset[seq % 2] + begin * element;
        terms[r] = shares[r];
      }
      char* mine = shares[rank_];
      if (world_ == 2) {
        sum_terms(mine, shares[1 - rank_], terms, count, dtype);  // both tensors in one pass
      } else {
        sum_terms(mine, nullptr, terms, count, dtype);
        for (int r = 0; r < world_; ++r)
          if (r != rank_) copy_bytes(shares[r], mine, static_cast<size_t>(count * element));
      }
    }
    all_done_reading(seq, timeout);
  }

  // Run a collective's steps; any failure leaves the communicator unusable (peers may be
  // anywhere in the protocol), so later calls fail at once instead of deadlocking.
  // The peers learn of it through Control::stopped, so that none waits out its timeout for
  // this rank.
  //
  // One collective at a time, whichever thread calls: two threads of one rank would share
  // the step counter and the slots, and each would take the other's progress for a peer's,
  // so a wait could neither finish nor time out. Taken without the GIL (the callers have
  // released it); a thread that waited behind a collective that failed fails too.
  template <typename Steps>
  bool guarded(Steps steps) {
    std::lock_guard<std::mutex> one_at_a_time(collective_);
    if (broken_.size()) throw std::runtime_error("this communicator failed earlier (" + broken_ + "); create a new process group");
    try {
      return steps();
    } catch (const std::exception& error) {
      broken_ = error.what();
      control(rank_).stopped.store(std::max<uint64_t>(sequence_, 1), std::memory_order_release);
      throw;
    }
  }

  // Run `step(seq, chunk, begin, count)` over chunks of at most `per_chunk` of the `total`
  // units (bytes or elements; one step when this rank is not eligible or there is nothing
  // to move); a step returning false (not every rank eligible) ends the collective.
  template <typename Step>
  bool for_each_chunk(int64_t total, int64_t per_chunk, bool eligible, double timeout, Step step) {
    const int64_t chunks = !eligible || total == 0 ? 1 : (total + per_chunk - 1) / per_chunk;
    for (int64_t c = 0; c < chunks; ++c) {
      const uint64_t seq = begin_step(timeout);
      const int64_t begin = c * per_chunk;
      if (!step(seq, c, begin, eligible ? std::min(per_chunk, total - begin) : int64_t{0})) return false;
    }
    return true;
  }

  // The next step's sequence number, once every rank has finished reading the buffer
  // this step will fill (it was last used two steps ago).
  uint64_t begin_step(double timeout) {
    const uint64_t seq = ++sequence_;
    if (seq > 2) wait_all(&Control::consumed, seq - 2, timeout, seq);
    return seq;
  }

  bool finish_step(uint64_t seq, bool result) {
    control(rank_).consumed.store(seq, std::memory_order_release);
    return result;
  }

  // Publish this rank's view of the step, wait for every rank's, and check they agree.
  void announce(uint64_t seq, int32_t op, int64_t numel, int dtype, bool eligible, int root, double timeout,
                int64_t offset = -1) {
    Control& mine = control(rank_);
    mine.offset[seq % 2] = offset;
    mine.numel[seq % 2] = static_cast<uint64_t>(numel);
    mine.dtype[seq % 2] = dtype;
    mine.eligible[seq % 2] = eligible ? 1 : 0;
    mine.op[seq % 2] = op;
    mine.root[seq % 2] = root;
    pass_gate(kArrivedGate, &Control::arrived, seq, timeout, false);
    check_peers(op, numel, dtype, root, seq);
  }

  Control& control(int rank) {
    return reinterpret_cast<Control*>(base_ + sizeof(Header))[rank];
  }

  char* buffer(int rank, uint64_t seq) {
    char* data = base_ + sizeof(Header) + world_ * sizeof(Control);
    return data + (static_cast<size_t>(rank) * 2 + seq % 2) * slot_bytes_;
  }

  bool all_eligible(uint64_t seq) {
    for (int r = 0; r < world_; ++r)
      if (control(r).eligible[seq % 2] == 0) return false;
    return true;
  }

  void check_peers(int32_t op, int64_t numel, int dtype, int root, uint64_t seq) {
    for (int r = 0; r < world_; ++r) {
      const Control& peer = control(r);
      const int32_t peer_op = peer.op[seq % 2];
      if (peer_op != op)
        throw std::invalid_argument(std::string("collective mismatch: rank ") + std::to_string(rank_) + " is in " +
                                    op_name(op) + ", rank " + std::to_string(r) + " in " + op_name(peer_op));
      const uint64_t peer_numel = peer.numel[seq % 2];
      const int peer_dtype = peer.dtype[seq % 2];
      const char* unit = op == kAllReduce || op == kReduceScatter ? " elements of " : " bytes of ";
      if (peer_numel != static_cast<uint64_t>(numel) || peer_dtype != dtype)
        throw std::invalid_argument(std::string(op_name(op)) + " mismatch: rank " + std::to_string(rank_) + " has " +
                                    std::to_string(numel) + unit + wire_name(dtype) + ", rank " + std::to_string(r) +
                                    " has " + std::to_string(peer_numel) + " of " + wire_name(peer_dtype));
      if (peer.root[seq % 2] != root)
        throw std::invalid_argument(std::string(op_name(op)) + " mismatch: rank " + std::to_string(rank_) + " has root " +
                                    std::to_string(root) + ", rank " + std::to_string(r) + " root " +
                                    std::to_string(peer.root[seq % 2]));
    }
  }

  // [begin, end) of rank r's share of `count` elements (multiples of 64 elements, so
  // shares fall on cache lines).
  std::pair<int64_t, int64_t> share(int r, int64_t count) const {
    const int64_t per = ((count + world_ - 1) / world_ + 63) / 64 * 64;
    const int64_t begin = std::min(count, r * per);
    return {begin, std::min(count, begin + per)};
  }

  // Copy every share of `tensor` but this rank's own into this rank's slot (the peers sum
  // them; this rank sums its own share straight from the tensor).
  void copy_other_shares(char* slot, const char* tensor, int64_t count, int64_t element) {
    for (int r = 0; r < world_; ++r) {
      const auto [begin, end] = share(r, count);
      if (r != rank_ && end > begin)
        copy_bytes(slot + begin * element, tensor + begin * element, static_cast<size_t>((end - begin) * element));
    }
  }

  // Sum this rank's share, in rank order (this rank's term from its tensor, the others'
  // from their slots), into the tensor and into this rank's slot for the peers.
  void reduce_share(char* tensor, uint64_t seq, int64_t count, int dtype) {
    const auto [begin, end] = share(rank_, count);
    if (end <= begin) return;
    const int64_t element = accel::dtype_size(dtype);
    char* mine = tensor + begin * element;
    std::vector<const char*> terms(world_);
    for (int r = 0; r < world_; ++r) terms[r] = r == rank_ ? mine : buffer(r, seq) + begin * element;
    sum_terms(mine, buffer(rank_, seq) + begin * element, terms, end - begin, dtype);
  }

  // out (and a non-null out2) = the sum of `terms` in rank order (fp32 arithmetic for
  // 16-bit dtypes); out may be one of the terms, element for element.
  void sum_terms(char* out, char* out2, const std::vector<const char*>& terms, int64_t count, int dtype) const {
    if (dtype == kFloat32) {
      std::vector<const float*> floats(terms.size());
      for (size_t r = 0; r < terms.size(); ++r) floats[r] = reinterpret_cast<const float*>(terms[r]);
      float* sums = reinterpret_cast<float*>(out);
      // One output that is none of the terms: straight into it, no block buffer.
      if (out2 == nullptr && std::find(terms.begin(), terms.end(), out) == terms.end())
        return sum_f32(sums, floats.data(), world_, count);
      if (world_ == 2) return sum2_f32(sums, reinterpret_cast<float*>(out2), floats[0], floats[1], count);
      sum_f32_blocked(sums, reinterpret_cast<float*>(out2), floats.data(), world_, count);
    } else {
      std::vector<const uint16_t*> halves(terms.size());
      for (size_t r = 0; r < terms.size(); ++r) halves[r] = reinterpret_cast<const uint16_t*>(terms[r]);
      // sum_half reads each block of every term before it writes that block.
      sum_half(reinterpret_cast<uint16_t*>(out), reinterpret_cast<uint16_t*>(out2), halves.data(), world_, count, dtype);
    }
  }

  // Copy each peer's summed share from its slot into `out`, starting with the next rank's
  // (ranks read different slots at the same time instead of all reading rank 0's first).
  void gather_other_shares(char* out, uint64_t seq, int64_t count, int64_t element) {
    for (int i = 1; i < world_; ++i) {
      const int r = (rank_ + i) % world_;
      const auto [begin, end] = share(r, count);
      if (end > begin)
        copy_bytes(out + begin * element, buffer(r, seq) + begin * element, static_cast<size_t>((end - begin) * element));
    }
  }

  void reduce(char* out, uint64_t seq, int64_t count, int dtype) {
    std::vector<const char*> slots(world_);
    for (int r = 0; r < world_; ++r) slots[r] = buffer(r, seq);
    sum_terms(out, nullptr, slots, count, dtype);
  }

  // Wait until `ready()`: spin briefly (latency), then yield, then sleep. Each nap is a
  // twentieth of the wait so far (50 us to 1 ms), and `check(late)` (which throws to give
  // up: a peer exited or stopped, or, `late` being past the deadline, is missing) runs as
  // often (1 to 20 ms): a longer nap adds at most ~5% to a wait that is already long, and a rank waiting
  // 5 s for a late peer burns ~0.1 s of CPU instead of the ~0.8 s that fixed 50 us naps
  // and 1 ms checks of /proc/<pid>/stat took (2 ranks, one sleeping 5 s before an
  // all-reduce).
  template <class Ready, class Check>
  static void wait_until(Ready ready, Check check, double timeout) {
    const double started = now_seconds();
    const double deadline = started + timeout;
    double next_check = 0.0;
    for (uint64_t spins = 0;; ++spins) {
      if (ready()) return;
      if (spins < 4096) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      const double now = now_seconds();
      if (now >= next_check) {
        next_check = now + std::clamp((now - started) / 20.0, 1e-3, 20e-3);
        check(now >= deadline);
      }
      nap(spins, now - started);
    }
  }

  // Wait until every rank's `field` reaches `target`.
  void wait_all(std::atomic<uint64_t> Control::*field, uint64_t target, double timeout, uint64_t seq) {
    int waiting_for = -1;
    const auto ready = [&] {
      waiting_for = -1;
      for (int r = 0; r < world_ && waiting_for < 0; ++r)
        if ((control(r).*field).load(std::memory_order_acquire) < target) waiting_for = r;
      return waiting_for < 0;
    };
    const auto check = [&](bool late) {
      if (const std::string why = laggard_failure(waiting_for, seq, late, timeout); !why.empty())
        throw std::runtime_error(why);
    };
    wait_until(ready, check, timeout);
  }

  // Why waiting for rank `r` in step `seq` must end ("" while it may go on): it exited, it
  // stopped after an error, or (`late`) the deadline passed.
  std::string laggard_failure(int r, uint64_t seq, bool late, double timeout) {
    const pid_t pid = static_cast<pid_t>(pids_[r]);
    const std::string who = "rank " + std::to_string(r);
    const std::string step = "collective step " + std::to_string(seq);
    if (has_exited(pid))
      return who + " (pid " + std::to_string(pid) + ") exited while rank " + std::to_string(rank_) + " waited for it in " + step;
    if (control(r).stopped.load(std::memory_order_acquire) != 0)
      return who + " left the collective after an error (see its own message) while rank " + std::to_string(rank_) +
             " waited for it in " + step;
    if (late)
      return "timed out after " + std::to_string(timeout) + " s: " + who + " did not reach " + step + " (rank " +
             std::to_string(rank_) + " waited)";
    return "";
  }

  // Past the first spins of a wait: yield, then nap a twentieth of the wait so far.
  static void nap(uint64_t spins, double waited) {
    if (spins < 16384) {
      sched_yield();
      return;
    }
    const double seconds = std::clamp(waited / 20.0, 50e-6, 1e-3);
    const timespec pause{0, static_cast<long>(seconds * 1e9)};
    nanosleep(&pause, nullptr);
  }

  static uint64_t gate_tag(uint64_t seq) { return (seq & 0xffffffffu) << 32; }

  // Enter gate `kind` of step `seq` (after recording the step in this rank's `field`, which
  // names who is missing) and wait until every rank has entered, or the gate failed. A rank
  // that gives up (deadline, a peer exited or stopped) first marks the gate failed, which
  // succeeds only while some rank has not entered: so either every rank passes or every
  // rank (late ones when they come) raises. With `wait_for_live`, a missing rank that is
  // alive and has not stopped is waited for past the deadline (see all_done_reading).
  void pass_gate(Gate kind, std::atomic<uint64_t> Control::*field, uint64_t seq, double timeout, bool wait_for_live) {
    (control(rank_).*field).store(seq, std::memory_order_release);
    std::atomic<uint64_t>& gate = header().gates[kind][seq % 2];
    const uint64_t tag = gate_tag(seq);
    uint64_t word = gate.load(std::memory_order_acquire);
    for (;;) {
      if ((word & ~uint64_t{0xffffffff}) != tag) {
        // Still the word of step seq - 2: this rank is the first here.
        if (gate.compare_exchange_weak(word, tag | 1, std::memory_order_acq_rel, std::memory_order_acquire)) break;
      } else if ((word & kGateFailed) != 0) {
        throw std::runtime_error(gate_failed(word, seq));
      } else if (gate.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        break;
      }
    }
    const auto ready = [&] {
      word = gate.load(std::memory_order_acquire);
      if ((word & kGateFailed) != 0) throw std::runtime_error(gate_failed(word, seq));
      return (word & kGateCount) == static_cast<uint64_t>(world_);
    };
    const auto check = [&](bool past_deadline) {
      int missing = -1;
      for (int r = 0; r < world_ && missing < 0; ++r)
        if ((control(r).*field).load(std::memory_order_acquire) < seq) missing = r;
      if (missing < 0) return;
      const bool late = past_deadline && !(wait_for_live && using_pools(missing));
      // fail_gate is false when every rank had entered after all: the next ready() sees it.
      if (const std::string why = laggard_failure(missing, seq, late, timeout); !why.empty())
        if (fail_gate(gate, seq)) throw std::runtime_error(why);
    };
    wait_until(ready, check, timeout);
  }

  // Whether rank r may still be reading or writing this rank's pooled tensor: alive, not
  // stopped.
  bool using_pools(int r) {
    return !has_exited(static_cast<pid_t>(pids_[r])) && control(r).stopped.load(std::memory_order_acquire) == 0;
  }

  // Mark `gate` of step `seq` failed by this rank. False when every rank has entered
  // (the gate passed); throws when another rank failed it first.
  bool fail_gate(std::atomic<uint64_t>& gate, uint64_t seq) {
    uint64_t word = gate.load(std::memory_order_acquire);
    for (;;) {
      if ((word & kGateCount) == static_cast<uint64_t>(world_)) return false;
      if ((word & kGateFailed) != 0) throw std::runtime_error(gate_failed(word, seq));
      const uint64_t failed = word | kGateFailed | (static_cast<uint64_t>(rank_) << kGateFailerShift);
      if (gate.compare_exchange_weak(word, failed, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
    }
  }

  std::string gate_failed(uint64_t word, uint64_t seq) const {
    const uint64_t failer = (word >> kGateFailerShift) & 0x7fff;
    return "collective step " + std::to_string(seq) + " failed: rank " + std::to_string(failer) +
           " gave up on it (a peer was late or exited; see its own message) before rank " + std::to_string(rank_) +
           " got through";
  }

  Header& header() { return *reinterpret_cast<Header*>(base_); }

  int fd_ = -1;  // rank 0's memfd until release()
  int rank_;
  int world_;
  std::vector<int64_t> pids_;
  char* base_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<Mapping> mapping_;  // unmaps base_ when the last user (this, a block) goes
  size_t pools_at_ = 0;               // where rank 0's pool starts in the segment
  uint64_t slot_bytes_ = 0;
  uint64_t pool_bytes_ = 0;
  std::shared_ptr<Pool> pool_;
  std::array<uint64_t, kReduceScatter + 1> pooled_calls_{};  // by Op
  uint64_t sequence_ = 0;
  std::mutex collective_;  // held by the collective under way (see guarded)
  std::string broken_;
};

}  // namespace

PYBIND11_MODULE(_shm_comm, m) {
  m.doc() = "accel's shared-memory all-reduce for the ranks of one node (see accel/comm.py)";
  accel::export_isa(m);
  accel::export_dtypes(m);
  py::dict others;
  for (int i = 0; i < kOtherCount; ++i) others[kOtherDTypes[i]] = kOtherBase + i;
  m.attr("OTHER_DTYPES") = others;
  m.attr("UNKNOWN_DTYPE") = kUnknownDType;
  py::class_<PoolBlock>(m, "PoolBlock", py::buffer_protocol())
      .def_buffer([](PoolBlock& block) {
        return py::buffer_info(block.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(block.nbytes())}, {1});
      })
      .def_property_readonly("nbytes", &PoolBlock::nbytes, "The block's size in bytes.")
      .def_property_readonly("offset", &PoolBlock::offset, "Where the block starts in its pool.");
  py::class_<Communicator>(m, "Communicator")
      .def(py::init<const std::string&, bool, int, int, uint64_t, uint64_t, std::vector<int64_t>, uint64_t>(),
           py::arg("path"), py::arg("create"), py::arg("rank"), py::arg("world"), py::arg("slot_bytes"),
           py::arg("session"), py::arg("pids"), py::arg("pool_bytes") = 0)
      .def("allocate", &Communicator::allocate, py::arg("nbytes"),
           "nbytes of this rank's pool (a buffer), or None when no free range is large enough.")
      .def_property_readonly("pool_bytes", &Communicator::pool_bytes, "Each rank's pool size in bytes.")
      .def_property_readonly("pool_free_bytes", &Communicator::pool_free_bytes, "This rank's free pool bytes.")
      .def_property_readonly("pooled_calls", &Communicator::pooled_calls,
                             "How many calls of each collective went straight between pooled tensors.")
      .def("path", &Communicator::path, "Where peers open the segment (/proc/<pid>/fd/<fd>; rank 0 only).")
      .def("release", &Communicator::release, "Close the creating rank's descriptor (the mappings stay).")
      .def("stop", &Communicator::stop, py::arg("reason"),
           "Leave after an error outside the segment: later calls raise naming reason, and "
           "peers waiting for this rank are told at once.")
      .def("all_reduce", &Communicator::all_reduce, py::arg("data"), py::arg("numel"), py::arg("dtype"),
           py::arg("eligible"), py::arg("timeout"),
           "Sum a buffer across the ranks in place; False (nothing done) if any rank is not eligible.")
      .def("all_gather", &Communicator::all_gather, py::arg("data"), py::arg("out"), py::arg("nbytes"), py::arg("dtype"),
           py::arg("eligible"), py::arg("timeout"),
           "Gather nbytes from every rank into out, in rank order; False if any rank is not eligible.")
      .def("broadcast", &Communicator::broadcast, py::arg("data"), py::arg("nbytes"), py::arg("dtype"), py::arg("root"),
           py::arg("eligible"), py::arg("timeout"),
           "Copy nbytes from rank root to every rank; False if any rank is not eligible.")
      .def("reduce_scatter", &Communicator::reduce_scatter, py::arg("data"), py::arg("out"), py::arg("numel"),
           py::arg("dtype"), py::arg("eligible"), py::arg("timeout"),
           "Sum block r of every rank's data into rank r's out; False if any rank is not eligible.")
      .def("barrier", &Communicator::barrier, py::arg("timeout"), "Return once every rank has entered.")
      .def_static("segment_bytes", &Communicator::segment_bytes, py::arg("world"), py::arg("slot_bytes"),
                  py::arg("pool_bytes"), "The segment's size in bytes; ValueError past MAX_SEGMENT_BYTES.");
  m.attr("MAX_SEGMENT_BYTES") = kMaxSegmentBytes;
  m.attr("MAX_WORLD") = kMaxWorld;
}
