#!/usr/bin/python3
"""Scale steps with cold joiners against prefaulted ones, in the same run
(docs/PERFORMANCE.md, "Scale steps with cold joiners").

A 4-worker cluster holds the 1 GiB model of bench_params.py (4 x [8192, 8192]
float32, alternately P(None,'model') and P('model',None), mesh {model: -1},
default replicas) after one `meshserve push`. Then, --rounds times (odd
rounds in the other order, so neither kind always comes first):

  - cold: 4 fresh worker processes join with the flags a plain
    `meshserve-worker` gets (whatever the worker does by default, e.g. warming
    its pool while it waits for work), the model re-placed on mesh[model=8];
  - the 4 leave (SIGTERM, 8 -> 4);
  - prefaulted: 4 fresh workers join started with --prefault_mib (their pool
    touched before they register), the same step;
  - the 4 leave again;
  - with --no_warmup_kind, also "cold, no warm-up": 4 fresh workers started
    with --warm_pool_mib 0 (the joiners as they were before the warm-up), the
    same step, and the 4 leave (the kinds rotate from round to round).

Each step reports the server's own scale-step seconds (Status' last scale
step), the wall time from all 8 registered until ready, the bytes moved and
their lower bound, and the joiners' warm-up: the longest "worker N warm
after" (or "not warm after") of the coordinator's log during the step. The
figure of merit is cold_vs_prefaulted: the median cold step over the median
prefaulted step (goal <= 2). --joiner_flags adds
flags to the cold joiners only (e.g. "--warm_pool_mib 0" for the workers'
behaviour without a warmed pool). Not part of the test suite; about 1-2
minutes per round on 2 cores, ~5 GiB of RAM, 1 GiB of disk in --work_dir.

Usage: bench/bench_scale.py [--bin_dir build/bin] [--rounds 2] [--prefault_mib 512]
                            [--joiner_flags "..."] [--no_warmup_kind] [--settle_s 5]
                            [--keep_logs] [--write_doc]
(--write_doc replaces the section "Scale steps with cold joiners" of
docs/PERFORMANCE.md with this run's figures.)
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import bench_params as bp  # noqa: E402  (model, checkpoint, push, status helpers)
import mslib  # noqa: E402


def scale_down(client, workers):
    """SIGTERM to the joiners; waits for mesh[model=4] and their exit."""
    gen = bp.model_of(bp.status(client)).generation
    for w in workers[4:]:
        w.send_signal(signal.SIGTERM)
    bp.wait_ready(client, lambda st, m: m.mesh == "mesh[model=4]" and m.generation > gen, 300)
    for w in workers[4:]:
        w.wait(timeout=120)
    del workers[4:]


def joiner_memory(workers):
    """Minor page faults, RSS and transparent-huge-page bytes of the joiners
    (/proc), summed: where a cold joiner's step goes."""
    faults = rss = huge = 0
    for w in workers[4:]:
        try:
            with open("/proc/%d/stat" % w.pid) as f:
                faults += int(f.read().rsplit(")", 1)[1].split()[7])
            with open("/proc/%d/smaps_rollup" % w.pid) as f:
                for line in f:
                    key, value = line.split(":", 1)
                    if key in ("Rss", "AnonHugePages"):
                        kib = int(value.split()[0])
                        rss, huge = (rss + kib, huge) if key == "Rss" else (rss, huge + kib)
        except (OSError, ValueError, IndexError):
            pass
    return {"joiner_pids": [w.pid for w in workers[4:]], "joiner_minor_faults": faults, "joiner_rss_mib": rss // 1024,
            "joiner_thp_mib": huge // 1024}


def warmup_s(log_path, offset):
    """The longest joiner warm-up the coordinator logged after byte `offset`
    of its log (seconds; 0 when none), and the log's size now."""
    with open(log_path, errors="replace") as f:
        f.seek(offset)
        text = f.read()
    longest = 0.0
    for m in re.finditer(r"warm after ([0-9.]+)(ms|s)\b", text):
        longest = max(longest, float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0))
    return longest, offset + len(text.encode())


def step_figures(step, label, settle_s):
    return {"kind": label, "step_s": round(step["step_s"], 3), "wall_s": round(step["wall_s"], 3),
            "bytes_moved": step["bytes_moved"], "lower_bound": step["lower_bound"],
            "settle_s": settle_s, "loadavg": [round(x, 2) for x in os.getloadavg()]}


DOC_HEADING = "## Scale steps with cold joiners"
DIAGNOSIS = (
    "Where a cold joiner's step goes (`perf record -a -g` over a run, the joiners' samples): "
    "two thirds of them are `clear_page_erms` under `do_huge_pmd_anonymous_page`, the first "
    "touch of the param buffers as the peer reads write them (256 MiB per joiner here); "
    "prefaulted joiners pay the same `clear_page_erms` in `PrefaultBufferPool`, before they "
    "register. Each cold joiner's peer reads take 3.1-4.2 s against 0.7-1.3 s prefaulted "
    "(the workers' `param_sources` log lines). Page size is not the lever on this VM: an A/B "
    "of the pool that faulted fresh buffers in as small pages in one "
    "`madvise(MADV_POPULATE_WRITE)` (not kept) spent 2.4-4.7 s per 256 MiB inside the step, "
    "as much as the huge-page faults; a one-process microbenchmark had shown small pages 10x "
    "cheaper only because it got back pages its predecessor had just freed (the host takes "
    "back free 2 MiB blocks, `page_reporting_order` 9, so fresh memory costs the host's "
    "fault whatever the guest's page size). What works is touching the memory before the "
    "step. Prefaulted joiners do it before they register. Cold joiners (default flags) do "
    "it after registering and before the coordinator places on them: the registration "
    "answer names the bytes the next placement will put on the joiner (the placed models' "
    "param bytes x (1 + replicas) over the workers after the join: 410, 341, 292 and 256 "
    "MiB here as the 4 joiners register one after another, an over-estimate for the first "
    "ones), the worker touches that much of its tensor pool on a thread and says warm in a "
    "heartbeat, and the coordinator leaves it out of placements until then (at most "
    "`--warmup_wait_ms`, 5 s by default; the warm-up column is the slowest joiner's). This "
    "moves the first touch before the step, not out of the join: the registered -> ready "
    "and started -> ready columns still hold it.")


def doc_section(results, args):
    """The page's section (no dates: scripts/check_docs.py)."""
    rows = ["| step | kind | scale step (s) | joiners' warm-up (s) | registered -> ready (s) "
            "| started -> ready (s) | bytes moved / lower bound "
            "| joiners' minor faults | joiners' THP MiB | load (1 min) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for i, st in enumerate(results["steps"]):
        rows.append("| %d | %s | %.2f | %.2f | %.2f | %.2f | %d / %d | %d | %d | %.1f |" % (
            i + 1, st["kind"], st["step_s"], st["warmup_s"], st["wall_s"], st["start_to_ready_s"],
            st["bytes_moved"], st["lower_bound"],
            st["joiner_minor_faults"], st["joiner_thp_mib"], st["loadavg"][0]))
    ratio = results["cold_vs_prefaulted"]
    before = []
    if "no_warmup_step_s" in results:
        before = ["", "Same run, cold joiners without the warm-up (`--warm_pool_mib 0`): median "
                  "step %.2f s, %.2fx the prefaulted step." % (
                      results["no_warmup_step_s"], results["no_warmup_vs_prefaulted"])]
    return "\n".join([
        DOC_HEADING, "",
        "Made by `bench/bench_scale.py --rounds %d --settle_s %g%s --write_doc` (1 GiB of params, "
        "4 -> 8 workers, default replicas; %d s between a scale-down and the next scale-up, so "
        "the memory the last joiners freed has gone back to the host as a fresh joiner's would "
        "have). Cold joiners: fresh `meshserve-worker` processes with default flags%s; "
        "prefaulted: started with `--prefault_mib %d`. Goal: the median cold step <= 2x the "
        "median prefaulted step, bytes moved at the lower bound." % (
            args.rounds, args.settle_s, " --no_warmup_kind" if args.no_warmup_kind else "",
            args.settle_s,
            (" and `%s`" % args.joiner_flags) if args.joiner_flags else "", args.prefault_mib),
        "",
        "**Median cold step %.2f s vs prefaulted %.2f s: %.2fx (%s); bytes moved %s the lower "
        "bound.**" % (results["cold_step_s"], results["prefaulted_step_s"], ratio,
                      "met" if ratio <= 2 else "not met",
                      "at" if results["bytes_at_lower_bound"] else "NOT at"),
        *before, "", *rows, "", DIAGNOSIS, ""])


def write_doc(path, section):
    """Replaces the section in `path` (up to the next "## " heading) or appends it."""
    text = open(path).read() if os.path.exists(path) else ""
    lines, out, inside, done = text.split("\n"), [], False, False
    for line in lines:
        if line.strip() == DOC_HEADING:
            inside, done = True, True
            out.extend(section.rstrip("\n").split("\n") + [""])
            continue
        if inside and line.startswith("## "):
            inside = False
        if not inside:
            out.append(line)
    new = "\n".join(out).rstrip("\n") + "\n"
    if not done:
        new = new + "\n" + section.rstrip("\n") + "\n"
    with open(path, "w") as f:
        f.write(new)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin_dir", default=os.path.join(os.path.dirname(HERE), "build", "bin"))
    ap.add_argument("--work_dir", default=tempfile.gettempdir())
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prefault_mib", type=int, default=512,
                    help="--prefault_mib of the prefaulted joiners")
    ap.add_argument("--joiner_flags", default="", help="extra flags of the cold joiners")
    ap.add_argument("--no_warmup_kind", action="store_true",
                    help="also step with cold joiners started with --warm_pool_mib 0")
    ap.add_argument("--settle_s", type=float, default=5.0,
                    help="pause before each scale-up (the cold joiners start after it)")
    ap.add_argument("--keep_logs", action="store_true")
    ap.add_argument("--write_doc", action="store_true",
                    help="replace the section \"%s\" of docs/PERFORMANCE.md" % DOC_HEADING)
    args = ap.parse_args()
    mc = mslib.client_package(args.bin_dir)
    root = tempfile.mkdtemp(prefix="bench-scale-", dir=args.work_dir)
    results = {"loadavg_start": list(os.getloadavg()), "steps": []}
    cold_flags = shlex.split(args.joiner_flags)
    warm_flags = ["--prefault_mib", str(args.prefault_mib)]
    try:
        model_dir = os.path.join(root, "models")
        os.makedirs(model_dir)
        bp.write_model(model_dir)
        ckpt = os.path.join(root, "push.safetensors")
        results["param_bytes"] = bp.write_checkpoint(ckpt)
        port = mslib.free_port()
        target = "127.0.0.1:%d" % port
        coordinator_log = os.path.join(root, "coordinator.log")
        mslib.start_coordinator(args.bin_dir, port, model_dir, 4, coordinator_log,
                                ["--heartbeat_ms", "500"])
        workers = [mslib.start_worker(args.bin_dir, target, os.path.join(root, "w%d.log" % i))
                   for i in range(4)]
        client = mc.MeshserveClient(target, timeout_s=60)
        bp.wait_ready(client, lambda st, m: m.mesh == "mesh[model=4]", 300)
        bp.push(args.bin_dir, target, ckpt)
        os.remove(ckpt)
        log_offset = 0
        kinds = [("cold", cold_flags), ("prefaulted", warm_flags)]
        if args.no_warmup_kind:
            kinds.append(("cold, no warm-up", ["--warm_pool_mib", "0"]))
        for r in range(args.rounds):
            order = kinds[::-1] if r % 2 else kinds  # no order bias
            if len(kinds) == 3:
                order = kinds[r % 3:] + kinds[:r % 3]
            for label, flags in order:
                time.sleep(args.settle_s)
                _, log_offset = warmup_s(coordinator_log, log_offset)
                t_start = time.time()
                step, _, _ = bp.scale_up(args, client, target, root, workers,
                                         "%s%d" % (label.replace(", no warm-up", "-nowarm"), r),
                                         flags)
                results["steps"].append(step_figures(step, label, args.settle_s))
                warm_s, log_offset = warmup_s(coordinator_log, log_offset)
                results["steps"][-1].update(joiner_memory(workers), warmup_s=round(warm_s, 3),
                                            start_to_ready_s=round(time.time() - t_start, 3))
                scale_down(client, workers)
        client.close()
        cold = [s["step_s"] for s in results["steps"] if s["kind"] == "cold"]
        warm = [s["step_s"] for s in results["steps"] if s["kind"] == "prefaulted"]
        no_warmup = [s["step_s"] for s in results["steps"] if s["kind"] == "cold, no warm-up"]
        if no_warmup:
            results.update(no_warmup_step_s=statistics.median(no_warmup),
                           no_warmup_vs_prefaulted=round(statistics.median(no_warmup) /
                                                         statistics.median(warm), 2))
        results.update(cold_step_s=statistics.median(cold), prefaulted_step_s=statistics.median(warm),
                       cold_vs_prefaulted=round(statistics.median(cold) /
                                                statistics.median(warm), 2),
                       bytes_at_lower_bound=all(s["bytes_moved"] == s["lower_bound"]
                                                for s in results["steps"]),
                       cold_joiner_flags=args.joiner_flags,
                       loadavg_end=list(os.getloadavg()))
        if args.write_doc:
            write_doc(os.path.join(os.path.dirname(HERE), "docs", "PERFORMANCE.md"),
                      doc_section(results, args))
    finally:
        mslib._cleanup()
        if args.keep_logs:
            results["logs"] = root
            shutil.rmtree(os.path.join(root, "models"), ignore_errors=True)
            if os.path.exists(os.path.join(root, "push.safetensors")):
                os.remove(os.path.join(root, "push.safetensors"))
        else:
            shutil.rmtree(root, ignore_errors=True)
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
