// The DLRM example's data layer: the synthetic generator's click probabilities are the ones its
// labels are drawn from (calibration per probability bin), the Criteo TSV reader parses a file
// written here (empty fields, negative counts, hashing into table sizes, log(1 + x)) and names
// the file, line and field of a malformed row, and the console output rewrites its progress
// line only on a terminal.
#include "dlrm_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dlrm_progress.h"

namespace {

namespace fs = std::filesystem;

TEST(DlrmSynth, LabelsAreDrawnFromTheReportedProbabilities) {
  const int64_t rows[3] = {1000, 50, 7};
  const dlrm_synth_t s = {3, 4, 3, rows};
  const int n = 200000;
  std::vector<float> dense(static_cast<size_t>(n) * 4), labels(n), probs(n);
  std::vector<int64_t> ids(static_cast<size_t>(n) * 3);
  dlrm_synth_fill(&s, 1000, n, dense.data(), ids.data(), labels.data());
  dlrm_synth_probability(&s, 1000, n, probs.data());
  // Per decile of probability, the share of positives must match the mean probability: the
  // binomial standard deviation bounds the gap (5 sigma), and the deciles differ from each
  // other by far more, so a probability unrelated to the labels fails.
  constexpr int kBins = 10;
  double sum_p[kBins] = {}, sum_y[kBins] = {}, count[kBins] = {};
  for (int i = 0; i < n; ++i) {
    const int b = std::min(kBins - 1, static_cast<int>(probs[i] * kBins));
    sum_p[b] += probs[i];
    sum_y[b] += labels[i];
    count[b] += 1;
  }
  int checked = 0;
  for (int b = 0; b < kBins; ++b) {
    if (count[b] < 500) continue;
    const double p = sum_p[b] / count[b];
    const double sigma = std::sqrt(p * (1 - p) / count[b]);
    EXPECT_NEAR(sum_y[b] / count[b], p, 5 * sigma + 1e-3) << "bin " << b;
    ++checked;
  }
  EXPECT_GE(checked, 4);
  // The Bayes-optimal scores carry a learnable signal (about 0.62 with these 7 features; 0.81
  // with Criteo's 39, dlrm_learn_test).
  EXPECT_GT(dlrm_auc(probs.data(), labels.data(), n), 0.58);
  // The same indices give the same probabilities (the stream is a pure function of the index).
  std::vector<float> again(10);
  dlrm_synth_probability(&s, 1000 + 500, 10, again.data());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(again[i], probs[500 + i]);
}

// Writes lines to a fresh file in the test's temporary directory (named per process: another
// build's run of this test may share the directory).
std::string WriteFile(const std::string& name, const std::vector<std::string>& lines) {
  const fs::path path =
      fs::path(::testing::TempDir()) / (std::to_string(static_cast<long>(getpid())) + "." + name);
  std::ofstream out(path);
  for (const auto& l : lines) out << l << "\n";
  return path.string();
}

// A Criteo line: label, 13 integers, 26 categoricals.
std::string Line(const std::string& label, std::vector<std::string> ints,
                 std::vector<std::string> cats) {
  ints.resize(13);
  cats.resize(26);
  std::string s = label;
  for (const auto& v : ints) s += "\t" + v;
  for (const auto& v : cats) s += "\t" + v;
  return s;
}

std::vector<int64_t> Rows() {
  std::vector<int64_t> rows(26);
  for (int f = 0; f < 26; ++f) rows[f] = 1000 + f;
  return rows;
}

TEST(DlrmCriteo, ParsesLabelsCountsAndHashedCategoricals) {
  const std::string path = WriteFile(
      "criteo_good.tsv", {Line("1", {"1", "", "-3", "0", "10"}, {"68fd1e64", "", "0000000a"}),
                          Line("0", {"", "", "", "", "", "", "", "", "", "", "", "", "1000000"},
                               std::vector<std::string>(26, "ffffffff")),
                          Line("1", {"2"}, {"1"})});
  const std::vector<int64_t> rows = Rows();
  dlrm_criteo_t r;
  ASSERT_EQ(dlrm_criteo_open(&r, path.c_str()), 0) << r.error;
  // Two samples, then the third alone: the reader keeps its place and its line count.
  std::vector<float> dense(2 * 13, -1.0f), labels(2, -1.0f);
  std::vector<int64_t> ids(2 * 26, -1);
  ASSERT_EQ(dlrm_criteo_read(&r, 2, rows.data(), dense.data(), ids.data(), labels.data()), 2)
      << r.error;
  EXPECT_EQ(labels[0], 1.0f);
  EXPECT_EQ(labels[1], 0.0f);
  // log(1 + x), negative counts and empty fields 0.
  EXPECT_FLOAT_EQ(dense[0], std::log1p(1.0f));
  EXPECT_EQ(dense[1], 0.0f);
  EXPECT_EQ(dense[2], 0.0f);
  EXPECT_EQ(dense[3], 0.0f);
  EXPECT_FLOAT_EQ(dense[4], std::log1p(10.0f));
  EXPECT_FLOAT_EQ(dense[13 + 12], static_cast<float>(std::log1p(1000000.0)));
  // Feature-major ids with stride 2: hex value mod the table's rows; empty is 0.
  EXPECT_EQ(ids[0 * 2 + 0], static_cast<int64_t>(0x68fd1e64ULL % 1000));
  EXPECT_EQ(ids[1 * 2 + 0], 0);
  EXPECT_EQ(ids[2 * 2 + 0], 10);
  EXPECT_EQ(ids[25 * 2 + 0], 0);
  for (int f = 0; f < 26; ++f) {
    EXPECT_EQ(ids[f * 2 + 1], static_cast<int64_t>(0xffffffffULL % (1000ULL + f))) << f;
  }
  EXPECT_EQ(r.line, 2);
  std::vector<float> d1(13), l1(1);
  std::vector<int64_t> i1(26);
  ASSERT_EQ(dlrm_criteo_read(&r, 1, rows.data(), d1.data(), i1.data(), l1.data()), 1);
  EXPECT_FLOAT_EQ(d1[0], std::log1p(2.0f));
  EXPECT_EQ(i1[0], 1);
  // End of file: fewer samples than asked, no error.
  EXPECT_EQ(dlrm_criteo_read(&r, 1, rows.data(), d1.data(), i1.data(), l1.data()), 0);
  dlrm_criteo_close(&r);
  fs::remove(path);
}

// Reads the whole file; returns the error message (empty when every line parsed).
std::string ReadError(const std::string& path) {
  const std::vector<int64_t> rows = Rows();
  dlrm_criteo_t r;
  if (dlrm_criteo_open(&r, path.c_str()) != 0) return r.error;
  std::vector<float> dense(13), labels(1);
  std::vector<int64_t> ids(26);
  int got = 1;
  std::string error;
  // One sample at a time after skipping one line unparsed, as a rank reading its slice does.
  if (dlrm_criteo_skip(&r, 1) != 1) error = "skip failed";
  while (error.empty() && got == 1) {
    got = dlrm_criteo_read(&r, 1, rows.data(), dense.data(), ids.data(), labels.data());
    if (got < 0) error = r.error;
  }
  dlrm_criteo_close(&r);
  return error;
}

TEST(DlrmCriteo, MalformedLinesNameTheFileLineAndField) {
  const std::string good = Line("0", {"1"}, {"a"});
  struct Case {
    std::string bad, expect;
  } cases[] = {
      {Line("0", {"1"}, {"a"}).substr(0, good.rfind('\t')), "39 tab-separated field(s)"},
      {good + "\textra", "41 tab-separated field(s)"},
      {Line("2", {"1"}, {"a"}), "label '2' is not 0 or 1"},
      {Line("1", {"1", "2", "3", "x7"}, {"a"}), "I4 'x7' is not an integer"},
      {Line("1", {"1", "2.5"}, {"a"}), "I2 '2.5' is not an integer"},
      {Line("1", {"1"}, {"a", "b", "c", "d", "e", "f", "zz"}), "C7 'zz' is not hexadecimal"},
      {Line("1", {"1"}, {"-1"}), "C1 '-1' is not hexadecimal"},
      {Line("1", {"1"}, {"10000000000000000"}),
       "C1 '10000000000000000' is hexadecimal beyond 64 bits"},
      {Line("1", {"99999999999999999999"}, {"a"}),
       "I1 '99999999999999999999' is beyond a 64-bit integer"},
      {"", "1 tab-separated field(s)"},
  };
  for (const auto& c : cases) {
    const std::string path = WriteFile("criteo_bad.tsv", {good, good, good, c.bad, good});
    const std::string error = ReadError(path);
    fs::remove(path);
    EXPECT_NE(error.find(path + ":4: "), std::string::npos) << error;
    EXPECT_NE(error.find(c.expect), std::string::npos) << error;
  }
  // The same file without the bad line reads to the end.
  const std::string ok = WriteFile("criteo_ok.tsv", {good, good, good + "\r", good});
  EXPECT_EQ(ReadError(ok), "");
  fs::remove(ok);
  dlrm_criteo_t r;
  EXPECT_EQ(dlrm_criteo_open(&r, "/nonexistent/criteo.tsv"), -1);
  EXPECT_NE(std::string(r.error).find("/nonexistent/criteo.tsv: cannot open"), std::string::npos);
  dlrm_criteo_close(&r);
}

std::string Printed(int terminal) {
  std::FILE* f = std::tmpfile();
  dlrm_progress_t p;
  dlrm_progress_init(&p, f, terminal);
  dlrm_progress_update(&p, "step %d", 1);
  dlrm_progress_update(&p, "step %d", 2);
  dlrm_progress_line(&p, "report %d", 2);
  dlrm_progress_update(&p, "step %d", 3);
  dlrm_progress_finish(&p);
  dlrm_progress_line(&p, "done");
  std::string out(static_cast<size_t>(std::ftell(f)), '\0');
  std::rewind(f);
  EXPECT_EQ(std::fread(out.data(), 1, out.size(), f), out.size());
  std::fclose(f);
  return out;
}

TEST(DlrmProgress, RewritesInPlaceOnATerminalAndPrintsPlainLinesElsewhere) {
  EXPECT_EQ(Printed(1), "\r\033[Kstep 1\r\033[Kstep 2\r\033[Kreport 2\n\r\033[Kstep 3\ndone\n");
  EXPECT_EQ(Printed(0), "report 2\ndone\n");
}

}  // namespace
