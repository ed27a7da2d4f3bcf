#!/usr/bin/env python3
"""Writes the dated results file of .ci/gpu-check from what its steps left in OUT.

Usage: gpu_results.py OUT
Reads OUT/env.txt, steps.tsv, tests/*.xml and *.log, bench.json, torch.jsonl, the sanitizers'
logs and fatbin.txt (any may be missing: a step that ran out of time leaves partial files), and
writes OUT/results/gpu/<date>-<device>.md. Only what was measured is written; missing parts say so.
"""
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def env_of(out):
    env = {}
    for line in (read(os.path.join(out, "env.txt")) or "").splitlines():
        key, _, value = line.partition(" ")
        env.setdefault(key, value.strip())
    return env


def steps_of(out):
    steps = []
    for line in (read(os.path.join(out, "steps.tsv")) or "").splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            steps.append(parts)
    return steps


def verdict(rc):
    return {"0": "passed", "77": "skipped", "124": "timed out", "137": "timed out"}.get(
        rc, "FAILED (exit %s)" % rc)


def gtest_counts(xml_path):
    """(tests, failures, skipped, failed case names with their first message)."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return None
    tests = failures = skipped = 0
    failed = []
    for case in root.iter("testcase"):
        tests += 1
        fail = case.find("failure")
        if fail is not None:
            failures += 1
            msg = (fail.get("message") or "").strip().splitlines()
            failed.append("%s.%s: %s" % (case.get("classname"), case.get("name"),
                                         msg[0][:300] if msg else ""))
        elif case.find("skipped") is not None or case.get("result") == "skipped":
            skipped += 1
    return tests, failures, skipped, failed


def bench_rows(out):
    data = read(os.path.join(out, "bench.json"))
    if not data:
        return None, []
    try:
        doc = json.loads(data)
    except ValueError:
        return None, []
    return doc.get("context", {}), doc.get("benchmarks", [])


def torch_rows(out):
    rows, meta = {}, {}
    for line in (read(os.path.join(out, "torch.jsonl")) or "").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if "id" in obj:
            rows[obj["id"]] = obj
        else:
            meta.update(obj)
    return meta, rows


def profile_lines(text):
    """Per-kernel time of the profiled window (ncu --csv --page raw, gpu__time_duration.sum)."""
    import csv
    rows = [r for r in csv.reader(l for l in text.splitlines() if l.startswith('"'))]
    if len(rows) < 3:
        return ["Kernel profile: no rows (see profile.csv).", ""]
    head = rows[0]
    try:
        k_name, k_time = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    except ValueError:
        return ["Kernel profile: unexpected columns (see profile.csv).", ""]
    unit = rows[1][k_time]
    total, per = 0.0, {}
    for r in rows[2:]:
        try:
            t = float(r[k_time].replace(",", ""))
        except (ValueError, IndexError):
            continue
        name = re.sub(r"\(.*", "", r[k_name])
        name = re.sub(r"^void ", "", name)
        name = re.sub(r"shardrec::embedding::kernels::", "", name)[:110]
        n, s = per.get(name, (0, 0.0))
        per[name] = (n + 1, s + t)
        total += t
    lines = ["## Kernel times of the backward (b4 fp32, a window of %d launches in steady state)"
             % sum(n for n, _ in per.values()), "",
             "| kernel | launches | total %s | share |" % unit, "|---|---|---|---|"]
    for name, (n, s) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        lines.append("| `%s` | %d | %.1f | %.0f %% |" % (name.replace("|", "/"), n, s,
                                                          100 * s / total if total else 0))
    return lines + [""]


def fmt(x, digits=1):
    return "-" if x is None else ("%.*f" % (digits, x))


def main():
    out = sys.argv[1]
    env = env_of(out)
    gpu = env.get("gpu", "unknown GPU")
    name = gpu.split(",")[0].strip() or "unknown GPU"
    date = env.get("date", "unknown")[:10]
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    lines = ["# GPU check %s: %s" % (date, name), ""]
    lines += [
        "Written by `.ci/gpu-check` (steps below); every figure is from this one run.",
        "",
        "| | |", "|---|---|",
        "| GPU (name, driver, memory, max SM / memory clock) | %s |" % gpu,
        "| driver's CUDA version | %s |" % env.get("driver_CUDA", "-").replace("Version: ", ""),
        "| host | %s; %s |" % (env.get("host", "-"), env.get("glibc", "-")),
        "| bundle | commit %s (uncommitted files: %s), built %s |" % (
            env.get("bundle_commit", "-")[:12], env.get("bundle_dirty", "-"),
            env.get("bundle_built", "-")),
        "| device code | nvcc %s, architectures %s, deterministic fp %s |" % (
            env.get("bundle_nvcc", "-"), env.get("bundle_cuda_architectures", "-"),
            env.get("bundle_deterministic_fp", "-")),
        "| NCCL | %s (pip nvidia-nccl-cu13 %s) |" % (env.get("nccl_dir", "-"),
                                                   env.get("nccl_pip", "-")),
        "| libstdc++ | %s |" % env.get("libstdcxx", "-"),
        "",
    ]
    missing = [l for l in (read(os.path.join(out, "env.txt")) or "").splitlines()
               if l.startswith("missing")]
    if missing:
        lines += ["Libraries not found on the GPU machine:", ""] + ["- " + m for m in missing] + [""]

    steps = steps_of(out)
    lines += ["## Tests", "",
              "| binary | result | cases | passed | failed | skipped | seconds |",
              "|---|---|---|---|---|---|---|"]
    failures_text = []
    n_pass = n_fail = 0
    for step, rc, secs in steps:
        if not step.startswith("test:"):
            continue
        binary = step[5:]
        counts = gtest_counts(os.path.join(out, "tests", binary + ".xml"))
        if counts:
            tests, failures, skipped, failed = counts
            cells = (tests, tests - failures - skipped, failures, skipped)
            failures_text += failed
        else:
            cells = ("-",) * 4
        if rc == "0":
            n_pass += 1
        elif rc != "77":
            n_fail += 1
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % ((binary, verdict(rc)) + cells +
                                                             (secs,)))
    lines += ["", "%d test binaries passed, %d failed or ran out of time." % (n_pass, n_fail), ""]
    if failures_text:
        lines += ["Failed cases (first message of each):", ""]
        lines += ["- `%s`" % f.replace("`", "'") for f in failures_text[:40]] + [""]
    # compute-sanitizer steps: each writes STEP.log (memcheck: the small kernel cases; the rest are
    # named after their tool and test binary).
    for step, rc, secs in steps:
        tool = step.split("_")[0]
        if tool not in ("memcheck", "racecheck", "synccheck"):
            continue
        log = read(os.path.join(out, step + ".log")) or ""
        summary = [l for l in log.splitlines() if "SUMMARY" in l]
        what = "the small kernel cases" if step == "memcheck" else step[len(tool) + 1:]
        lines += ["compute-sanitizer %s over %s: %s (%s), %s s." % (
            tool, what, verdict(rc), summary[-1].strip(" =") if summary else "no summary",
            secs), ""]
    fatbin = read(os.path.join(out, "fatbin.txt"))
    if fatbin:
        archs = sorted(set(re.findall(r"sm_\d+", fatbin)))
        stacks = sorted(set(re.findall(r"STACK:(\d+)", fatbin)))
        regs = [int(r) for r in re.findall(r"REG:(\d+)", fatbin)]
        local = sorted(set(re.findall(r"LOCAL:(\d+)", fatbin)))
        lines += ["Plugin fatbin: architectures %s; stack frame sizes seen %s; local memory "
                  "sizes seen %s; registers per thread %s to %s (cuobjdump "
                  "--dump-resource-usage)." % (
                      ", ".join(archs) or "-", ", ".join(stacks) or "-", ", ".join(local) or "-",
                      min(regs) if regs else "-", max(regs) if regs else "-"), ""]

    context, benches = bench_rows(out)
    tmeta, trows = torch_rows(out)
    lines += ["## Benchmarks", ""]
    if not benches:
        lines += ["No benchmark figures (the benchmark did not run or did not finish).", ""]
    else:
        by = {b["name"].split("/iterations")[0]: b for b in benches}
        copy = by.get("roof/BW_copy", {}).get("GBps")
        gather = by.get("roof/BW_gather", {}).get("GBps")
        lines += [
            "Roofs measured in the same run: BW_copy = %s GB/s (2 GiB device-to-device copy, "
            "bytes read + written), BW_gather = %s GB/s (uniformly random 512-byte rows of a "
            "16 GiB buffer, bytes read + written). Times: CUDA events around the op, median and "
            "p90 of 100 calls after 10 warm-ups over 4 rotating id batches. Byte models: see "
            "tests/bench/embedding_gpu_bench.cc. PyTorch: %s, nn.EmbeddingBag(mode='sum') on the "
            "same GPU and shapes (tests/bench/gpu_fwd_torch.py; tables of one width as one "
            "concatenated EmbeddingBag call, mixed widths as one call per table; its outputs are "
            "in the weights' dtype, ours fp32)." % (fmt(copy, 0), fmt(gather, 0),
                                                     tmeta.get("torch", "not run")),
            "",
            "### gpu_fwd: pooled forward, all tables in one call", "",
            "| shape | median us | p90 us | phys GB/s | x BW_gather | FBGEMM-conv GB/s | "
            "PyTorch median us | PyTorch / ours (time) |",
            "|---|---|---|---|---|---|---|---|"]
        for b in benches:
            if not b["name"].startswith("gpu_fwd/"):
                continue
            sid = b["name"].split("/", 1)[1].split("/")[0]
            if b.get("error_occurred"):
                lines.append("| %s | error: %s | | | | | | |" % (sid, b.get("error_message")))
                continue
            t = trows.get(sid, {})
            tm = t.get("median_us")
            ratio = tm / b["median_us"] if tm and b.get("median_us") else None
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                sid, fmt(b.get("median_us")), fmt(b.get("p90_us")), fmt(b.get("phys_GBps"), 0),
                fmt(b.get("x_gather"), 2), fmt(b.get("fbgemm_GBps"), 0),
                fmt(tm) if tm else t.get("error", "-"), fmt(ratio, 2)))
        lines += ["", "### gpu_bwd: GroupRows + FusedBackward (row-wise Adagrad), one call pair "
                  "per table", "",
                  "| shape | median us | p90 us | phys GB/s | x BW_copy |", "|---|---|---|---|---|"]
        for b in benches:
            if not b["name"].startswith("gpu_bwd/"):
                continue
            sid = b["name"].split("/", 1)[1].split("/")[0]
            if b.get("error_occurred"):
                lines.append("| %s | error: %s | | | |" % (sid, b.get("error_message")))
                continue
            lines.append("| %s | %s | %s | %s | %s |" % (
                sid, fmt(b.get("median_us")), fmt(b.get("p90_us")), fmt(b.get("phys_GBps"), 0),
                fmt(b.get("x_copy"), 2)))
        lines.append("")
    prof = read(os.path.join(out, "profile.csv"))
    if prof:
        lines += profile_lines(prof)
    lines += ["## Steps", "", "| step | result | seconds |", "|---|---|---|"]
    lines += ["| %s | %s | %s |" % (s, verdict(rc) if s != "fatbin" else (
        "passed" if rc == "0" else "FAILED (an architecture missing or local memory used)"), secs)
        for s, rc, secs in steps]
    lines.append("")
    dest = os.path.join(out, "results", "gpu")
    os.makedirs(dest, exist_ok=True)
    path = os.path.join(dest, "%s-%s.md" % (date, slug))
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print("gpu_results: wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
