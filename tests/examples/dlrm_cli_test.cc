// The DLRM example as a user runs it (the built `dlrm` program, DLRM_BINARY): two separate
// processes meeting through a unique id train together and end with the same loss, which is
// also the loss of the same run with the ranks as threads; a Criteo file trains to its end; a
// malformed Criteo row stops every rank with an error naming the file and line, and a non-zero
// exit status.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Process {
  std::FILE* pipe = nullptr;
  std::string output;
  int status = -1;
};

// Starts `args` (stdout and stderr together) with one BLAS thread, as one rank per core wants.
Process Start(const std::string& args) {
  Process p;
  const std::string command = "OPENBLAS_NUM_THREADS=1 " DLRM_BINARY " " + args + " 2>&1";
  p.pipe = popen(command.c_str(), "r");
  EXPECT_NE(p.pipe, nullptr) << command;
  return p;
}

void Finish(Process* p) {
  if (p->pipe == nullptr) return;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p->pipe)) > 0) p->output.append(buf, n);
  const int status = pclose(p->pipe);
  p->pipe = nullptr;
  p->status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Process RunToEnd(const std::string& args) {
  Process p = Start(args);
  Finish(&p);
  return p;
}

// The number printed after "rank <rank>: final loss", or "" when absent.
std::string FinalLoss(const std::string& output, int rank) {
  std::smatch m;
  const std::regex re("rank " + std::to_string(rank) + ": final loss ([0-9.eE+-]+)");
  return std::regex_search(output, m, re) ? m[1].str() : "";
}

// A fresh directory, removed again at the end of the test; per process, since another build's
// run of this test may share the temporary directory.
struct ScratchDir {
  explicit ScratchDir(const std::string& name)
      : path(fs::path(::testing::TempDir()) /
             (name + "." + std::to_string(static_cast<long>(getpid())))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  fs::path path;
};

const std::string kSmallRun =
    "--world 2 --shard 2 --steps 8 --batch 32 --max-rows 5000 --report 4 --eval-every 4 "
    "--eval-batches 2";

TEST(DlrmCli, TwoProcessesMeetingThroughAUniqueIdEndWithTheSameLoss) {
  const ScratchDir scratch("dlrm_cli_processes");
  const fs::path& dir = scratch.path;
  const std::string id_file = (dir / "id").string();
  Process rank0 = Start(kSmallRun + " --rank 0 --unique-id-file " + id_file);
  Process rank1 = Start(kSmallRun + " --rank 1 --unique-id-file " + id_file);
  Finish(&rank0);
  Finish(&rank1);
  ASSERT_EQ(rank0.status, 0) << rank0.output;
  ASSERT_EQ(rank1.status, 0) << rank1.output;
  EXPECT_NE(rank0.output.find("unique id"), std::string::npos) << rank0.output;
  EXPECT_NE(rank0.output.find("held-out AUC"), std::string::npos) << rank0.output;
  const std::string loss0 = FinalLoss(rank0.output, 0), loss1 = FinalLoss(rank1.output, 1);
  ASSERT_FALSE(loss0.empty()) << rank0.output;
  EXPECT_EQ(loss0, loss1) << rank1.output;
  EXPECT_NE(std::stod(loss0), 0.0);
  // The same ranks as threads of one process train the same model on the same data.
  const Process threads = RunToEnd(kSmallRun);
  ASSERT_EQ(threads.status, 0) << threads.output;
  EXPECT_EQ(FinalLoss(threads.output, 0), loss0) << threads.output;
  // A rank without the id is refused at once with a usage message.
  const Process lost = RunToEnd(kSmallRun + " --rank 1");
  EXPECT_NE(lost.status, 0);
  EXPECT_NE(lost.output.find("needs rank 0's id"), std::string::npos) << lost.output;
}

TEST(DlrmCli, TheIdRankZeroPrintsLetsAnotherProcessJoin) {
  Process rank0 = Start(kSmallRun + " --rank 0");
  ASSERT_NE(rank0.pipe, nullptr);
  // Read rank 0's output up to the line with the id, then start rank 1 with it.
  std::string id;
  char line[1024];
  while (id.empty() && std::fgets(line, sizeof(line), rank0.pipe) != nullptr) {
    rank0.output += line;
    std::cmatch m;
    if (std::regex_search(line, m, std::regex("DLRM_UNIQUE_ID\\): ([0-9a-f]+)"))) id = m[1].str();
  }
  ASSERT_EQ(id.size(), 256u) << rank0.output;
  Process rank1 = Start(kSmallRun + " --rank 1 --unique-id " + id);
  Finish(&rank1);
  Finish(&rank0);
  ASSERT_EQ(rank0.status, 0) << rank0.output;
  ASSERT_EQ(rank1.status, 0) << rank1.output;
  EXPECT_EQ(FinalLoss(rank0.output, 0), FinalLoss(rank1.output, 1)) << rank1.output;
  EXPECT_FALSE(FinalLoss(rank1.output, 1).empty()) << rank1.output;
  // A malformed id is refused before any connection.
  const Process bad = RunToEnd(kSmallRun + " --rank 1 --unique-id 12ab");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("256 hex digits"), std::string::npos) << bad.output;
}

// A Criteo line: label, 13 counts, 26 hex categoricals, varied by i.
std::string CriteoLine(int i) {
  std::string s = std::to_string(i % 3 == 0 ? 1 : 0);
  for (int j = 0; j < 13; ++j) s += "\t" + (j == 5 ? std::string() : std::to_string(i * j % 97));
  char hex[16];
  for (int f = 0; f < 26; ++f) {
    std::snprintf(hex, sizeof(hex), "%08x", static_cast<unsigned>((i * 2654435761u) ^ f));
    s += "\t" + (f == 7 ? std::string() : std::string(hex));
  }
  return s;
}

std::string WriteCriteo(const fs::path& path, int lines, int bad_line, const std::string& bad) {
  std::ofstream out(path);
  for (int i = 1; i <= lines; ++i) out << (i == bad_line ? bad : CriteoLine(i)) << "\n";
  return path.string();
}

// --rounding stochastic reaches the optimizer: FP8 tables then end at another loss than with
// nearest rounding, the same one when run again (the bits are keyed, not drawn); another value
// is a usage error.
TEST(DlrmCli, StochasticRoundingOfFp8TablesIsDeterministicAndDiffersFromNearest) {
  const std::string fp8 = kSmallRun + " --tables fp8_e4m3 --eval-every 0 --rounding ";
  const Process nearest = RunToEnd(fp8 + "nearest");
  const Process stochastic = RunToEnd(fp8 + "stochastic");
  const Process again = RunToEnd(fp8 + "stochastic");
  ASSERT_EQ(nearest.status, 0) << nearest.output;
  ASSERT_EQ(stochastic.status, 0) << stochastic.output;
  ASSERT_EQ(again.status, 0) << again.output;
  ASSERT_NE(FinalLoss(nearest.output, 0), "") << nearest.output;
  EXPECT_NE(FinalLoss(stochastic.output, 0), FinalLoss(nearest.output, 0)) << stochastic.output;
  EXPECT_EQ(FinalLoss(again.output, 0), FinalLoss(stochastic.output, 0)) << again.output;
  const Process bad = RunToEnd(fp8 + "up");
  EXPECT_NE(bad.status, 0) << bad.output;
  EXPECT_NE(bad.output.find("usage:"), std::string::npos) << bad.output;
}

const std::string kCriteoRun = "--world 2 --shard 2 --batch 4 --steps 100 --report 2 ";

TEST(DlrmCli, TrainsOnACriteoFileToItsEnd) {
  const ScratchDir scratch("dlrm_cli_criteo");
  const fs::path& dir = scratch.path;
  // 2 held-out global batches of 8 lines, then 5 training steps and 3 lines left over.
  const std::string file = WriteCriteo(dir / "day.tsv", 59, -1, "");
  const Process p = RunToEnd(kCriteoRun + "--eval-every 2 --eval-batches 2 --criteo " + file);
  EXPECT_EQ(p.status, 0) << p.output;
  EXPECT_NE(p.output.find("end of " + file + " after 5 steps"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("held-out AUC"), std::string::npos) << p.output;
}

// Raw ids from a file have the file's cardinality, not the synthetic data's: every table gets
// the capacity --dynamic asks for (feature 8's synthetic cardinality is 3, which used to cap its
// table at 3 slots and turn most of the file's ids away as "full").
TEST(DlrmCli, DynamicTablesOnACriteoFileGetTheAskedCapacity) {
  const ScratchDir scratch("dlrm_cli_dynamic");
  const std::string file = WriteCriteo(scratch.path / "day.tsv", 59, -1, "");
  const Process p = RunToEnd(kCriteoRun + "--eval-every 0 --dynamic 1000 --criteo " + file);
  EXPECT_EQ(p.status, 0) << p.output;
  EXPECT_NE(p.output.find("t8         56 rows of      1000"), std::string::npos) << p.output;
  EXPECT_TRUE(std::regex_search(p.output, std::regex("rejected full 0\\b"))) << p.output;
  EXPECT_FALSE(std::regex_search(p.output, std::regex("full +[1-9]"))) << p.output;
  // A capacity that is not a positive number is a usage error, not fixed tables.
  for (const char* bad : {"abc", "0", "12x"}) {
    const Process q = RunToEnd(kCriteoRun + "--dynamic " + std::string(bad) + " --criteo " + file);
    EXPECT_NE(q.status, 0) << bad << q.output;
    EXPECT_NE(q.output.find("usage:"), std::string::npos) << bad << q.output;
  }
}

TEST(DlrmCli, MalformedCriteoRowStopsEveryRankNamingTheLine) {
  const ScratchDir scratch("dlrm_cli_bad");
  const fs::path& dir = scratch.path;
  // Line 23 is in rank 1's half of the third global batch (lines 17..24): rank 0 skips it
  // unparsed and still learns that the run must stop.
  const std::string file = WriteCriteo(dir / "bad.tsv", 40, 23, CriteoLine(23) + "\tx");
  const Process p = RunToEnd(kCriteoRun + "--eval-every 0 --criteo " + file);
  EXPECT_NE(p.status, 0) << p.output;
  EXPECT_NE(p.output.find(file + ":23: 41 tab-separated field(s)"), std::string::npos) << p.output;
  EXPECT_EQ(p.output.find("done"), std::string::npos) << p.output;
  // In the held-out part of the file, too.
  const std::string early = WriteCriteo(dir / "early.tsv", 40, 3, "1\t2\t3");
  const Process q = RunToEnd(kCriteoRun + "--eval-every 1 --eval-batches 1 --criteo " + early);
  EXPECT_NE(q.status, 0) << q.output;
  EXPECT_NE(q.output.find(early + ":3: 3 tab-separated field(s)"), std::string::npos) << q.output;
}

}  // namespace
