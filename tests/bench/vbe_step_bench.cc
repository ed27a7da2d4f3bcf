// Variable batch size per feature (docs/variable-batch.md, issue 64) against the same batch with
// the user features repeated per candidate, through the public C API. A request-shaped batch per
// rank: 64 requests, each one user with 10 user features (multi-hot, bags of kUserBag ids) and 200
// candidate items with 10 item features (bags of kItemBag ids), so 12800 samples. Twenty
// table-wise row-wise-Adagrad tables (one per feature, kRows x kDim fp32). Modes, on fresh
// collections, interleaved in rounds, each kWarmup steps then kSteps timed training steps
// (forward + backward of a fixed gradient):
//   repeated  the plain batch, user bags copied to each of the request's 200 samples;
//   vbe_inv   the VBE view (user B_f = 64, item B_f = 12800) with inverse indices: the same
//             12800 x 640 output as `repeated`;
//   vbe_fm    the VBE view without inverse indices: the feature-major output.
// Printed per world (1 and 2, ranks as threads): the median step of each mode over the rounds
// (with the smallest and largest round medians) and its ratio to `repeated`, the same for the
// process's CPU time per step (every rank's threads; what a loaded machine inflates least), and
// the bytes of one rank's step messages computed from the message layout
// (impl/embedding/input_dist.h: int32 lengths per bag and unit, a VBE batch's B_f per unit and its
// count; int64 ids; the return and gradient messages one row of kDim floats per non-empty bag),
// counting every destination (at world 2 the share that crosses to the peer is that of the tables
// the peer owns).
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/bench/capi_bench_util.h"
#include "tests/bench/rank_threads.h"

namespace {

using shardrec::bench::Check;
using Clock = std::chrono::steady_clock;

constexpr int kUserFeatures = 10;
constexpr int kItemFeatures = 10;
constexpr int kFeatures = kUserFeatures + kItemFeatures;
constexpr int64_t kRequests = 64;
constexpr int64_t kCandidates = 200;
constexpr int64_t kSamples = kRequests * kCandidates;
constexpr int32_t kUserBag = 10;
constexpr int32_t kItemBag = 1;
constexpr int64_t kRows = 50000;
constexpr int32_t kDim = 32;
constexpr int kWarmup = 3;
constexpr int kSteps = 10;

enum class Mode { kRepeated, kVbeInverse, kVbeFeatureMajor };
const char* ModeName(Mode m) {
  return m == Mode::kRepeated ? "repeated" : m == Mode::kVbeInverse ? "vbe_inv" : "vbe_fm";
}

// One rank's batch in both forms.
struct Batch {
  // VBE: feature-major, user features kRequests bags, item features kSamples bags.
  std::vector<int64_t> sizes;
  std::vector<int32_t> vbe_lengths;
  std::vector<int64_t> vbe_ids;
  std::vector<int64_t> inverse;
  // Repeated: every feature kSamples bags.
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
};

Batch MakeBatch(uint64_t seed) {
  std::mt19937_64 gen(seed);
  Batch b;
  std::vector<std::vector<int64_t>> user(kUserFeatures);
  for (int f = 0; f < kFeatures; ++f) {
    const bool is_user = f < kUserFeatures;
    const int64_t bags = is_user ? kRequests : kSamples;
    const int32_t bag = is_user ? kUserBag : kItemBag;
    b.sizes.push_back(bags);
    for (int64_t i = 0; i < bags; ++i) {
      b.vbe_lengths.push_back(bag);
      for (int32_t k = 0; k < bag; ++k) {
        const auto id = static_cast<int64_t>(gen() % kRows);
        b.vbe_ids.push_back(id);
        if (is_user) user[f].push_back(id);
      }
    }
    for (int64_t s = 0; s < kSamples; ++s) b.inverse.push_back(is_user ? s / kCandidates : s);
  }
  // The repeated form: each request's user bags copied to its kCandidates samples.
  size_t item_at = 0;
  for (int f = 0; f < kUserFeatures; ++f) item_at += static_cast<size_t>(kRequests * kUserBag);
  for (int f = 0; f < kFeatures; ++f) {
    for (int64_t s = 0; s < kSamples; ++s) {
      if (f < kUserFeatures) {
        b.lengths.push_back(kUserBag);
        const auto* first = user[f].data() + (s / kCandidates) * kUserBag;
        b.ids.insert(b.ids.end(), first, first + kUserBag);
      } else {
        b.lengths.push_back(kItemBag);
        b.ids.insert(b.ids.end(), b.vbe_ids.begin() + static_cast<int64_t>(item_at),
                     b.vbe_ids.begin() + static_cast<int64_t>(item_at + kItemBag));
        item_at += kItemBag;
      }
    }
  }
  return b;
}

shardrec_kjt_view_t PlainView(const Batch& b) {
  shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
  v.batch_size = kSamples;
  v.num_features = kFeatures;
  v.lengths = b.lengths.data();
  v.num_lengths = b.lengths.size();
  v.values = b.ids.data();
  v.num_values = b.ids.size();
  return v;
}

shardrec_kjt_vbe_view_t VbeView(const Batch& b, bool inverse) {
  shardrec_kjt_vbe_view_t v = SHARDREC_KJT_VBE_VIEW_INIT;
  v.kjt.batch_size = kSamples;  // with inverse: output samples; without: the largest B_f
  v.kjt.num_features = kFeatures;
  v.kjt.lengths = b.vbe_lengths.data();
  v.kjt.num_lengths = b.vbe_lengths.size();
  v.kjt.values = b.vbe_ids.data();
  v.kjt.num_values = b.vbe_ids.size();
  v.feature_batch_sizes = b.sizes.data();
  v.num_feature_batch_sizes = b.sizes.size();
  if (inverse) {
    v.inverse_indices = b.inverse.data();
    v.num_inverse_indices = b.inverse.size();
  }
  return v;
}

// The process's CPU seconds (every thread): a step's CPU time does not count the time its threads
// waited for a core, which on a shared machine is most of the wall time.
double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The output and gradient buffers: std::vector's (glibc puts a large one 16 bytes into a cache
// line, so every 128-byte row of a feature spans three lines), or, with `aligned`, on 64-byte
// boundaries as a PyTorch tensor's are (two lines a row), or, with `huge`, also on 2 MiB pages
// (MADV_HUGEPAGE before the first touch; with transparent huge pages in "madvise" mode nothing
// else gets them): a step walks the 33 MB expanded output in strides of a whole row, one or two
// rows a 4 KiB page, so on small pages nearly every row costs a TLB walk.
enum class Buffers { kVector, kAligned, kHuge };
Buffers g_buffers = Buffers::kVector;
struct Floats {
  std::vector<float> vec;
  std::unique_ptr<float, decltype(&std::free)> mem{nullptr, &std::free};
  float* ptr = nullptr;
  Floats(size_t n, float value) {
    if (g_buffers == Buffers::kVector) {
      vec.assign(n, value);
      ptr = vec.data();
      return;
    }
    const size_t align = g_buffers == Buffers::kHuge ? size_t{2} << 20 : 64;
    const size_t bytes = (n * sizeof(float) + align - 1) / align * align;
    mem.reset(static_cast<float*>(std::aligned_alloc(align, bytes)));
    ptr = mem.get();
    if (ptr == nullptr) std::abort();
    if (g_buffers == Buffers::kHuge) madvise(ptr, bytes, MADV_HUGEPAGE);  // refused: small pages
    std::fill(ptr, ptr + n, value);
  }
  float* data() { return ptr; }
};

struct Timing {
  double wall = 0;  // median seconds of a step (rank 0's)
  double cpu = 0;   // median CPU seconds of the process over rank 0's steps (all ranks' work)
};

// Median seconds of kSteps timed steps of a fresh collection on every rank (rank 0's).
Timing Run(shardrec::bench::RankThreads& ranks, const shardrec_plan_t* plan,
           const std::vector<shardrec_comm_t*>& comms, const std::vector<Batch>& batches,
           Mode mode) {
  Timing median;
  ranks.Run([&](int r) {
    shardrec_embedding_t* c = nullptr;
    Check(shardrec_embedding_create(&c, plan, comms[static_cast<size_t>(r)], nullptr, nullptr),
          "create");
    const Batch& b = batches[static_cast<size_t>(r)];
    const shardrec_kjt_view_t plain = PlainView(b);
    const shardrec_kjt_vbe_view_t vbe = VbeView(b, mode == Mode::kVbeInverse);
    size_t len = 0;
    if (mode == Mode::kRepeated) {
      int64_t dim = 0;
      shardrec_embedding_output_dim(c, &dim);
      len = static_cast<size_t>(kSamples * dim);
    } else {
      Check(shardrec_embedding_vbe_output_len(c, &vbe, &len), "len");
    }
    Floats out(len, 0.0f), grad(len, 0.001f);
    std::vector<double> steps, cpu;
    for (int s = 0; s < kWarmup + kSteps; ++s) {
      const auto t0 = Clock::now();
      const double c0 = r == 0 ? ProcessCpuSeconds() : 0;
      if (mode == Mode::kRepeated)
        Check(shardrec_embedding_forward(c, &plain, out.data(), len, nullptr), "fwd");
      else
        Check(shardrec_embedding_forward_vbe(c, &vbe, out.data(), len, nullptr), "fwd_vbe");
      Check(shardrec_embedding_backward(c, grad.data(), len, nullptr), "bwd");
      if (s < kWarmup) continue;
      steps.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      if (r == 0) cpu.push_back(ProcessCpuSeconds() - c0);
    }
    std::sort(steps.begin(), steps.end());
    std::sort(cpu.begin(), cpu.end());
    if (r == 0) median = Timing{steps[steps.size() / 2], cpu[cpu.size() / 2]};
    shardrec_embedding_destroy(c);
  });
  return median;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Bytes of one rank's step messages (all destinations): ids out, rows back, gradients out.
struct Bytes {
  double ids = 0;
  double rows = 0;
};
Bytes MessageBytes(Mode mode) {
  Bytes b;
  for (int f = 0; f < kFeatures; ++f) {
    const bool is_user = f < kUserFeatures;
    // A VBE batch's message carries each unit's B_f length slots and their count (input_dist.h).
    const int64_t bags = mode == Mode::kRepeated || !is_user ? kSamples : kRequests;
    const int32_t bag = is_user ? kUserBag : kItemBag;
    const double slots = mode == Mode::kRepeated ? kSamples : static_cast<double>(bags) + 1;
    b.ids += slots * 4 + static_cast<double>(bags * bag) * 8;
    b.rows += static_cast<double>(bags) * kDim * 4;
  }
  return b;
}

// What bounds the inverse-index mode from below: the expanded batch's output (kSamples x
// kFeatures * kDim floats) written once and a gradient of that size read once, as every mode with
// the plain output layout must at least do per step, on one thread; the median CPU ms per step
// over `rounds` rounds of kSteps.
double ExpandedFloorMs(int rounds) {
  const size_t n = static_cast<size_t>(kSamples) * kFeatures * kDim;
  Floats out_buf(n, 0.0f), grad_buf(n, 0.5f);  // on the steps' kind of buffers
  float* out = out_buf.data();
  const float* grad = grad_buf.data();
  std::vector<double> per_round;
  float sink = 0.0f;
  for (int r = 0; r < rounds; ++r) {
    const double c0 = ProcessCpuSeconds();
    for (int s = 0; s < kSteps; ++s) {
      std::fill(out, out + n, static_cast<float>(s));
      float sum = 0.0f;
      for (size_t i = 0; i < n; i += 16) sum += grad[i];  // one float per cache line: every line
      sink += sum + out[static_cast<size_t>(s)];
    }
    per_round.push_back((ProcessCpuSeconds() - c0) / kSteps);
  }
  if (sink == -1.0f) std::printf("%f\n", static_cast<double>(sink));
  std::sort(per_round.begin(), per_round.end());
  return per_round[per_round.size() / 2] * 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  // Arguments: [rounds] [only-mode] [only-world] [aligned|huge]; a mode or world named alone is for
  // profiling (its speedup column is then against itself); "all" and 0 name every mode and world.
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  const std::string only_mode = argc > 2 && std::string(argv[2]) != "all" ? argv[2] : "";
  const int only_world = argc > 3 ? std::atoi(argv[3]) : 0;
  const std::string buffers = argc > 4 ? argv[4] : "";
  g_buffers = buffers == "huge"      ? Buffers::kHuge
              : buffers == "aligned" ? Buffers::kAligned
                                     : Buffers::kVector;
  std::vector<std::string> names;
  for (int f = 0; f < kFeatures; ++f)
    names.push_back((f < kUserFeatures ? "u" : "i") + std::to_string(f));
  std::vector<shardrec_feature_config_t> features(kFeatures);
  std::vector<shardrec_table_config_t> tables(kFeatures);
  std::vector<shardrec_table_constraints_t> cons(kFeatures);
  std::vector<int32_t> index(kFeatures);
  for (int f = 0; f < kFeatures; ++f) {
    index[f] = f;
    shardrec_feature_config_init(&features[f], SHARDREC_FEATURE_CONFIG_VERSION);
    features[f].name = names[f].c_str();
    features[f].pooling_factor = f < kUserFeatures ? kUserBag : kItemBag;
    shardrec_table_config_init(&tables[f], SHARDREC_TABLE_CONFIG_VERSION);
    tables[f].name = names[f].c_str();
    tables[f].rows = kRows;
    tables[f].dim = kDim;
    tables[f].features = &index[f];
    tables[f].num_features = 1;
    shardrec_table_constraints_init(&cons[f], SHARDREC_TABLE_CONSTRAINTS_VERSION);
    cons[f].table = names[f].c_str();
    cons[f].sharding_types = 1u << SHARDREC_SHARDING_TABLE_WISE;
  }
  std::printf(
      "%d requests x %d candidates = %d samples per rank; %d user features (bags of %d),"
      " %d item features (bags of %d); %d tables %d x %d, table-wise, row-wise Adagrad;"
      " %d rounds of %d steps; output and gradient %s\n",
      static_cast<int>(kRequests), static_cast<int>(kCandidates), static_cast<int>(kSamples),
      kUserFeatures, kUserBag, kItemFeatures, kItemBag, kFeatures, static_cast<int>(kRows), kDim,
      rounds, kSteps,
      g_buffers == Buffers::kHuge      ? "64-byte aligned on 2 MiB pages"
      : g_buffers == Buffers::kAligned ? "64-byte aligned"
                                       : "std::vector's (16 bytes into a line)");
  std::printf("%-5s %-9s %10s %13s %8s %9s %8s %12s %12s\n", "world", "mode", "step_ms", "min..max",
              "speedup", "cpu_ms", "cpu_x", "id_MB", "rows_MB");
  for (int world : {1, 2}) {
    if (only_world != 0 && world != only_world) continue;
    shardrec_topology_t topo;
    shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
    topo.world_size = world;
    topo.batch_size = static_cast<int32_t>(kSamples);
    topo.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
    shardrec_plan_t* plan = nullptr;
    Check(shardrec_plan_create(&plan, tables.data(), tables.size(), features.data(),
                               features.size(), &topo, cons.data(), cons.size()),
          "plan");
    std::vector<shardrec_comm_t*> comms(static_cast<size_t>(world));
    Check(shardrec_comm_create_local_group(comms.data(), world, nullptr), "comm");
    std::vector<Batch> batches;
    for (int r = 0; r < world; ++r) batches.push_back(MakeBatch(17 + static_cast<uint64_t>(r)));
    shardrec::bench::RankThreads ranks(world);
    std::vector<Mode> modes = {Mode::kRepeated, Mode::kVbeInverse, Mode::kVbeFeatureMajor};
    if (!only_mode.empty())
      modes.erase(std::remove_if(modes.begin(), modes.end(),
                                 [&](Mode m) { return only_mode != ModeName(m); }),
                  modes.end());
    if (modes.empty()) {
      std::fprintf(stderr, "unknown mode '%s' (repeated, vbe_inv, vbe_fm)\n", only_mode.c_str());
      return 2;
    }
    std::vector<std::vector<double>> t(modes.size()), cpu(modes.size());
    for (int round = 0; round < rounds; ++round)
      for (size_t m = 0; m < modes.size(); ++m) {
        const Timing one = Run(ranks, plan, comms, batches, modes[m]);
        t[m].push_back(one.wall);
        cpu[m].push_back(one.cpu);
      }
    const double base = Median(t[0]);
    const double base_cpu = Median(cpu[0]);
    for (size_t m = 0; m < modes.size(); ++m) {
      const Bytes bytes = MessageBytes(modes[m]);
      std::printf(
          "%-5d %-9s %10.2f %6.2f..%-6.2f %8.2f %9.2f %8.2f %12.2f %12.2f\n", world,
          ModeName(modes[m]), Median(t[m]) * 1e3, *std::min_element(t[m].begin(), t[m].end()) * 1e3,
          *std::max_element(t[m].begin(), t[m].end()) * 1e3, base / Median(t[m]),
          Median(cpu[m]) * 1e3, base_cpu / Median(cpu[m]), bytes.ids / 1e6, 2 * bytes.rows / 1e6);
    }
    for (shardrec_comm_t* c : comms) shardrec_comm_destroy(c);
    shardrec_plan_destroy(plan);
  }
  std::printf(
      "floor: the %dx%d expanded output written once and its gradient read once: %.2f CPU ms "
      "per step (one thread)\n",
      static_cast<int>(kSamples), kFeatures * kDim, ExpandedFloorMs(std::max(rounds, 3)));
  return 0;
}
