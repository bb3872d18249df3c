// A shared-memory channel through which one process (the driver) asks another (the worker)
// to run optimizer steps, and waits for them: DeepSpeed's ZenFlow steps its Adam in a
// dedicated process this way (accel/integrations/deepspeed/zenflow.py).
//
// The channel lives in memory the caller owns, usually a shared torch tensor, and is named
// by its address. Commands go through a ring of kSlots slots, so the driver may submit the
// next step while the worker still runs the previous one (ZenFlow's pipeline does); a
// counting semaphore announces each command, another each completion. A worker that fails
// stores the message in the block, and the driver's wait raises it.
//
// Every function first checks that the address is aligned memory of this process that it
// may read and write (each one writes the block: a slot, a counter, a semaphore), holding a
// block channel_init prepared (magic and version), so a wrong address is a ValueError
// rather than a crash; and channel_submit checks each group's hyper-parameters as
// accel/ops/step_channel.py does (hyperparameters.h). Blocking calls release the GIL and
// wake for signals.

#include "step_channel.h"

#include "hyperparameters.h"

#include <pybind11/stl.h>

#include <errno.h>
#include <semaphore.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

constexpr uint64_t kMagic = 0x316c6e6863706574ULL;  // "tepchnl1"
constexpr uint32_t kVersion = 1;
constexpr int kMaxGroups = 1024;
constexpr int kSlots = 4;
constexpr int kHyper = 5;  // lr, beta1, beta2, eps, weight_decay
constexpr size_t kMessageBytes = 1024;
constexpr size_t kPage = 4096;

enum Command : int32_t { kStep = 1, kExit = 2 };

struct Slot {
  int32_t command;
  int32_t state_index;
  int64_t step;
  double hyper[kMaxGroups][kHyper];
  uint8_t bias_correction[kMaxGroups];
};

struct Block {
  std::atomic<uint64_t> magic;  // stored last by channel_init
  uint32_t version;
  int32_t groups;
  std::atomic<uint64_t> submitted;  // commands the driver has written
  std::atomic<uint64_t> taken;      // commands the worker has copied out
  std::atomic<uint32_t> closed;     // the exit command was submitted
  std::atomic<uint32_t> failed;     // the worker reported an error: message holds it
  char message[kMessageBytes];
  sem_t command_ready;
  sem_t done;
  Slot slots[kSlots];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");

std::string hex(uintptr_t address) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%zx", static_cast<size_t>(address));
  return text;
}

// One byte of every page of [address, address + bytes), as iovecs.
std::vector<iovec> page_probes(uintptr_t address, size_t bytes) {
  std::vector<iovec> probes;
  for (uintptr_t at = address; at < address + bytes; at = (at / kPage + 1) * kPage)
    probes.push_back({reinterpret_cast<void*>(at), 1});
  probes.push_back({reinterpret_cast<void*>(address + bytes - 1), 1});
  return probes;
}

// Where process_vm_readv is refused (a seccomp or ptrace policy), write() into a pipe
// reports an unreadable buffer the same way, with EFAULT.
bool readable_through_pipe(const std::vector<iovec>& probes) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(std::string("step channel: pipe(): ") + std::strerror(errno));
  bool ok = true;
  char sink;
  for (const iovec& probe : probes) {
    if (write(fds[1], probe.iov_base, 1) != 1 || read(fds[0], &sink, 1) != 1) {
      ok = false;
      break;
    }
  }
  close(fds[0]);
  close(fds[1]);
  return ok;
}

// True when every byte of [address, address + bytes) is mapped and readable: the kernel
// copies a byte of each page and answers EFAULT where there is none, instead of faulting.
bool readable(uintptr_t address, size_t bytes) {
  if (address == 0 || address > std::numeric_limits<uintptr_t>::max() - bytes) return false;
  const std::vector<iovec> probes = page_probes(address, bytes);
  std::vector<char> sink(probes.size());
  for (size_t begin = 0; begin < probes.size(); begin += IOV_MAX) {
    const size_t count = std::min<size_t>(IOV_MAX, probes.size() - begin);
    std::vector<iovec> local(count);
    for (size_t i = 0; i < count; ++i) local[i] = {&sink[begin + i], 1};
    const ssize_t got = process_vm_readv(getpid(), local.data(), count, &probes[begin], count, 0);
    if (got == static_cast<ssize_t>(count)) continue;
    if (got < 0 && (errno == EPERM || errno == ENOSYS)) return readable_through_pipe(probes);
    return false;
  }
  return true;
}

// True when /proc/self/maps lists every byte of [address, address + bytes) in mappings
// this process may write (the lines are sorted by address).
bool writable_in_maps(uintptr_t address, size_t bytes) {
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr)
    throw std::runtime_error(std::string("step channel: cannot read /proc/self/maps: ") + std::strerror(errno));
  const uintptr_t end = address + bytes;
  uintptr_t covered = address;  // every byte below is in a writable mapping
  char* line = nullptr;
  size_t capacity = 0;
  while (covered < end && getline(&line, &capacity, maps) != -1) {
    unsigned long long first = 0, last = 0;
    char permissions[5] = {};
    if (std::sscanf(line, "%llx-%llx %4s", &first, &last, permissions) != 3) continue;
    if (last <= covered) continue;
    if (first > covered || permissions[1] != 'w') break;  // a gap, or a mapping not writable
    covered = static_cast<uintptr_t>(last);
  }
  std::free(line);
  std::fclose(maps);
  return covered >= end;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older C libraries do not name it
#endif

// True when every byte of [address, address + bytes) may be written, found without writing
// one: the other process may be writing the block this moment, so rewriting a byte read
// could lose its write. madvise(MADV_POPULATE_WRITE) prepares the pages for writing as a
// write would, without the write (the block keeps its contents), and fails where a write
// would fault. Where its answer is not "yes" or "unmapped", /proc/self/maps decides (EINVAL:
// a read-only mapping, a device mapping, or a kernel before 5.14; EPERM from a policy).
bool writable(uintptr_t address, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = address / page * page;
  if (madvise(reinterpret_cast<void*>(start), address + bytes - start, MADV_POPULATE_WRITE) == 0) return true;
  if (errno == ENOMEM || errno == EFAULT) return false;  // unmapped, or a write would fault
  return writable_in_maps(address, bytes);
}

// Every entry point's check of the address: aligned, and a block's bytes this process may
// read and write (each entry point writes the block: init all of it, the others a slot, a
// counter or a semaphore), so a wrong address is a ValueError instead of a crash.
void require_memory(uintptr_t address) {
  if (address % alignof(Block) != 0)
    throw py::value_error("step channel: address " + hex(address) + " must be aligned to " +
                          std::to_string(alignof(Block)) + " bytes");
  if (!readable(address, sizeof(Block)))
    throw py::value_error("step channel: address " + hex(address) + " (" + std::to_string(sizeof(Block)) +
                          " bytes) is not readable memory of this process");
  if (!writable(address, sizeof(Block)))
    throw py::value_error("step channel: address " + hex(address) + " (" + std::to_string(sizeof(Block)) +
                          " bytes) is not writable memory of this process");
}

// The block at a checked address; ValueError unless channel_init prepared it.
Block& channel(uintptr_t address) {
  require_memory(address);
  Block& block = *reinterpret_cast<Block*>(address);
  if (block.magic.load(std::memory_order_acquire) != kMagic || block.version != kVersion)
    throw py::value_error("step channel: no channel at address " + hex(address) +
                          " (channel_init was not called on this memory)");
  return block;
}

[[noreturn]] void raise_failure(const Block& block) {
  throw std::runtime_error(std::string("the optimizer worker failed: ") + block.message);
}

// Waits on a semaphore without the GIL; nullopt deadline waits for ever. Signals are
// handled between waits (Ctrl-C raises KeyboardInterrupt). False on timeout.
bool wait_semaphore(sem_t* semaphore, std::optional<double> timeout) {
  timespec deadline{};
  if (timeout) {
    clock_gettime(CLOCK_REALTIME, &deadline);
    const double whole = std::floor(*timeout);
    deadline.tv_sec += static_cast<time_t>(whole);
    deadline.tv_nsec += static_cast<long>((*timeout - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1000000000L;
    }
  }
  while (true) {
    int result;
    int error;
    {
      py::gil_scoped_release released;
      result = timeout ? sem_timedwait(semaphore, &deadline) : sem_wait(semaphore);
      error = errno;
    }
    if (result == 0) return true;
    if (error == ETIMEDOUT) return false;
    if (error != EINTR) throw std::runtime_error(std::string("step channel: sem_wait: ") + std::strerror(error));
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

int64_t channel_size() { return static_cast<int64_t>(sizeof(Block)); }

void channel_init(uintptr_t address, int groups) {
  if (groups < 1 || groups > kMaxGroups)
    throw py::value_error("step channel: groups must be in [1, " + std::to_string(kMaxGroups) + "], got " +
                          std::to_string(groups));
  require_memory(address);
  std::memset(reinterpret_cast<void*>(address), 0, sizeof(Block));
  Block& block = *reinterpret_cast<Block*>(address);
  block.version = kVersion;
  block.groups = groups;
  if (sem_init(&block.command_ready, /*pshared=*/1, 0) != 0 || sem_init(&block.done, 1, 0) != 0)
    throw std::runtime_error(std::string("step channel: sem_init: ") + std::strerror(errno));
  block.magic.store(kMagic, std::memory_order_release);
}

// The slot the next command goes to; RuntimeError when the worker failed, the channel is
// closed, or every slot holds a command the worker has not taken yet.
Slot& next_slot(Block& block, const char* what) {
  if (block.failed.load(std::memory_order_acquire)) raise_failure(block);
  if (block.closed.load(std::memory_order_acquire))
    throw std::runtime_error(std::string("step channel: cannot ") + what + " after the exit command");
  const uint64_t submitted = block.submitted.load(std::memory_order_relaxed);
  if (submitted - block.taken.load(std::memory_order_acquire) >= kSlots)
    throw std::runtime_error("step channel: " + std::to_string(kSlots) +
                             " commands already wait for the worker; wait for one before submitting more");
  return block.slots[submitted % kSlots];
}

void post(Block& block) {
  block.submitted.fetch_add(1, std::memory_order_release);
  if (sem_post(&block.command_ready) != 0)
    throw std::runtime_error(std::string("step channel: sem_post: ") + std::strerror(errno));
}

void channel_submit(uintptr_t address, int state_index, int64_t step, const std::vector<std::vector<double>>& hyper,
                    const std::vector<bool>& bias_correction) {
  Block& block = channel(address);
  if (state_index != 0 && state_index != 1)
    throw py::value_error("step channel: state_index must be 0 or 1, got " + std::to_string(state_index));
  if (step < 1) throw py::value_error("step channel: step must be >= 1, got " + std::to_string(step));
  const size_t groups = static_cast<size_t>(block.groups);
  if (hyper.size() != groups || bias_correction.size() != groups)
    throw py::value_error("step channel: the channel has " + std::to_string(groups) + " groups, got " +
                          std::to_string(hyper.size()) + " hyper-parameter rows and " +
                          std::to_string(bias_correction.size()) + " bias_correction flags");
  for (size_t g = 0; g < groups; ++g) {
    if (hyper[g].size() != kHyper)
      throw py::value_error("step channel: group " + std::to_string(g) + " needs 5 hyper-parameters, got " +
                            std::to_string(hyper[g].size()));
    // lr, beta1, beta2, eps, weight_decay: the ranges accel/ops/step_channel.py checks.
    const std::string group = "step channel: group " + std::to_string(g) + ": ";
    accel::check_non_negative(hyper[g][0], group + "lr");
    accel::check_beta(hyper[g][1], group + "beta1");
    accel::check_beta(hyper[g][2], group + "beta2");
    accel::check_eps(hyper[g][3], group + "eps");
    accel::check_non_negative(hyper[g][4], group + "weight_decay");
  }
  Slot& slot = next_slot(block, "submit a step");
  slot.command = kStep;
  slot.state_index = state_index;
  slot.step = step;
  for (size_t g = 0; g < groups; ++g) {
    std::copy(hyper[g].begin(), hyper[g].end(), slot.hyper[g]);
    slot.bias_correction[g] = bias_correction[g] ? 1 : 0;
  }
  post(block);
}

bool channel_wait(uintptr_t address, double timeout) {
  Block& block = channel(address);
  if (!(timeout >= 0.0 && timeout <= 1e9))
    throw py::value_error("step channel: timeout must be a number of seconds in [0, 1e9], got " +
                          std::to_string(timeout));
  if (!wait_semaphore(&block.done, timeout)) return false;
  if (block.failed.load(std::memory_order_acquire)) raise_failure(block);
  return true;
}

void channel_exit(uintptr_t address) {
  Block& block = channel(address);
  Slot& slot = next_slot(block, "exit");
  slot.command = kExit;
  block.closed.store(1, std::memory_order_release);
  post(block);
}

// The worker's side: the next command, ("step", state_index, step, groups), ("exit",) or
// ("idle",) when none came within the timeout.
py::tuple channel_next(uintptr_t address, double timeout) {
  Block& block = channel(address);
  if (!(timeout >= 0.0 && timeout <= 1e9))
    throw py::value_error("step channel: timeout must be a number of seconds in [0, 1e9], got " +
                          std::to_string(timeout));
  if (!wait_semaphore(&block.command_ready, timeout)) return py::make_tuple("idle");
  const uint64_t taken = block.taken.load(std::memory_order_relaxed);
  if (block.submitted.load(std::memory_order_acquire) <= taken)
    throw std::runtime_error("step channel: woken without a command (the block was changed under the channel)");
  const Slot& slot = block.slots[taken % kSlots];
  if (slot.command == kExit) {
    block.taken.fetch_add(1, std::memory_order_release);
    return py::make_tuple("exit");
  }
  py::list groups;
  for (int g = 0; g < block.groups; ++g) {
    const double* h = slot.hyper[g];
    groups.append(py::make_tuple(h[0], h[1], h[2], h[3], h[4], slot.bias_correction[g] != 0));
  }
  py::tuple command = py::make_tuple("step", slot.state_index, slot.step, groups);
  block.taken.fetch_add(1, std::memory_order_release);  // the slot may be rewritten from here on
  return command;
}

void channel_complete(uintptr_t address, std::optional<std::string> error) {
  Block& block = channel(address);
  if (error) {
    const size_t length = std::min(error->size(), kMessageBytes - 1);
    std::memcpy(block.message, error->data(), length);
    block.message[length] = '\0';
    block.failed.store(1, std::memory_order_release);
  }
  if (sem_post(&block.done) != 0)
    throw std::runtime_error(std::string("step channel: sem_post: ") + std::strerror(errno));
}

}  // namespace

namespace accel {

void export_step_channel(py::module_& m) {
  m.attr("CHANNEL_MAX_GROUPS") = kMaxGroups;
  m.attr("CHANNEL_SLOTS") = kSlots;
  m.def("channel_size", &channel_size, "Bytes a step channel occupies.");
  m.def("channel_init", &channel_init, "Prepare a step channel at an address.", py::arg("address"),
        py::arg("groups"));
  m.def("channel_submit", &channel_submit, "Queue one step for the worker.", py::arg("address"),
        py::arg("state_index"), py::arg("step"), py::arg("hyper"), py::arg("bias_correction"));
  m.def("channel_wait", &channel_wait, "Wait for one completed command; False on timeout.", py::arg("address"),
        py::arg("timeout"));
  m.def("channel_exit", &channel_exit, "Queue the exit command.", py::arg("address"));
  m.def("channel_next", &channel_next, "The worker's next command.", py::arg("address"), py::arg("timeout"));
  m.def("channel_complete", &channel_complete, "Report a command done, or failed with a message.",
        py::arg("address"), py::arg("error"));
}

}  // namespace accel
