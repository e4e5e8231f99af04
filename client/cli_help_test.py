#!/usr/bin/env python3
"""Every `meshserve` sub-command answers --help with its usage and flags (exit 0)."""
import subprocess
import sys

COMMANDS = {
    "infer": ["--target", "--model", "--input"],
    "describe": ["--target", "--input_shape"],
    "status": ["--target"],
    "bench": ["--target", "--model", "--concurrency"],
    "local": ["--workers", "--model_dir", "--then", "--replicas"],
    "rules": ["--human"],
    "plan": ["--human"],
    "demo": [],
    "import": ["--hf_dir", "--out_dir", "--name", "--mesh"],
    "push": ["--target", "--model", "--checkpoint", "--tls_dir", "--auth_token_file"],
    "pull": ["--target", "--model", "--output", "--params"],
    "generate": ["--target", "--model", "--prompt", "--prompt_ids", "--max_tokens",
                 "--temperature", "--top_k", "--top_p", "--seed", "--ids"],
}


def main() -> int:
    binary = sys.argv[1]
    failures = []
    for command, flags in COMMANDS.items():
        for help_flag in ("--help", "-h"):
            r = subprocess.run([binary, command, help_flag], capture_output=True, text=True,
                               timeout=30)
            if r.returncode != 0 or f"usage: meshserve {command}" not in r.stdout:
                failures.append(f"{command} {help_flag}: rc={r.returncode} out={r.stdout!r}")
                continue
            missing = [f for f in flags if f not in r.stdout]
            if missing:
                failures.append(f"{command} {help_flag}: flags {missing} not listed")
    r = subprocess.run([binary, "status", "--bogus"], capture_output=True, text=True, timeout=30)
    if r.returncode != 2 or "unknown flag --bogus" not in r.stderr:
        failures.append(f"status --bogus: rc={r.returncode} err={r.stderr!r}")
    for f in failures:
        print("FAIL", f)
    print(f"{len(COMMANDS) * 2 + 1 - len(failures)} checks passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
