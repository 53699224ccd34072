"""tests/tally.py - the count of a python test (tests/*_test.py): checks passed and
failed, skips, and the closing line "RESULT NAME passed=P failed=F skipped=S" that
tests/run.sh adds up."""
import os
import sys


class Tally:
    def __init__(self, name):
        self.name = name
        self.passed = self.failed = self.skipped = 0

    def check(self, ok, what):
        """Counts one check; a failed one is named on stderr. Returns ok."""
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {what}", file=sys.stderr)
        return ok

    def skip(self, what):
        self.skipped += 1
        print(f"SKIP: {what}", file=sys.stderr)

    def need(self, what):
        """A missing dependency (numpy, gguf): a skip on a developer's machine, a
        failure under CI=true, where tools/deps.sh --test must have installed it."""
        if os.environ.get("CI") == "true":
            self.check(False, f"{what} (CI=true: a missing test dependency is a failure)")
        else:
            self.skip(what)

    def result(self):
        """Prints the RESULT line; returns the exit status (1 if any check failed)."""
        print(f"RESULT {self.name} passed={self.passed} failed={self.failed} skipped={self.skipped}")
        return 1 if self.failed else 0
