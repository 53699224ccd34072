#!/usr/bin/env python3
"""server_test.py - runs the server's pytest suite (tests/server) for tests/run.sh and
prints its count as "RESULT server passed=P failed=F skipped=S" (one count per pytest
test; an error in a fixture counts as a failure).

The suite needs openai, requests and pytest. tools/deps.sh --test puts them in
$BUILD/venv when $PYTHON lacks them; this script re-runs itself with that venv's
python then. Missing everywhere: a skip, or a failure under CI=true."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("BUILD", "build")


def have_deps():
    # find_spec, not import: importing openai before pytest starts keeps pytest from
    # rewriting the asserts of the plugins it pulls in (a warning)
    import importlib.util
    return all(importlib.util.find_spec(m) for m in ("openai", "pytest", "requests"))


def main():
    if not have_deps():
        venv = os.path.join(ROOT if not os.path.isabs(BUILD) else "", BUILD, "venv", "bin", "python3")
        # (the venv's python is a link to the same interpreter: compare nothing but the flag)
        if os.path.exists(venv) and not os.environ.get("MINFER_SERVER_TEST_REEXEC"):
            env = dict(os.environ, MINFER_SERVER_TEST_REEXEC="1")
            return subprocess.call([venv, os.path.abspath(__file__)], env=env)
        why = "openai/requests/pytest not importable; run tools/deps.sh --test"
        if os.environ.get("CI") == "true":
            print(f"FAIL {why} (CI=true: a missing test dependency is a failure)", file=sys.stderr)
            print("RESULT server passed=0 failed=1 skipped=0")
            return 1
        print(f"SKIP: {why}", file=sys.stderr)
        print("RESULT server passed=0 failed=0 skipped=1")
        return 0

    import pytest

    class Count:
        passed = failed = skipped = 0

        def pytest_runtest_logreport(self, report):
            if report.when == "call":
                if report.passed:
                    self.passed += 1
                elif report.failed:
                    self.failed += 1
                else:
                    self.skipped += 1
            elif report.failed:  # setup or teardown error
                self.failed += 1
            elif report.skipped and report.when == "setup":
                self.skipped += 1

    c = Count()
    os.chdir(ROOT)
    rc = pytest.main(["-q", "-p", "no:cacheprovider", "-rfEs", os.path.join("tests", "server")], plugins=[c])
    if rc not in (0, 1) and c.failed == 0:  # usage error, interrupted, nothing collected
        c.failed = 1
    print(f"RESULT server passed={c.passed} failed={c.failed} skipped={c.skipped}")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
