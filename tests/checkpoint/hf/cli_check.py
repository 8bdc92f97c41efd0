"""What the command-line checks beside it share: a fresh work directory, the
launcher run there, named expectations on its exit and output, and the
verdict. Standard library only."""
import os
import shutil
import subprocess
import sys


class Cli:
    def __init__(self, launcher, work):
        self.launcher, self.work, self.failures = launcher, work, []
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)

    def run(self, *args):
        p = subprocess.run([self.launcher, *args], capture_output=True, text=True, cwd=self.work)
        return p.returncode, p.stdout + p.stderr

    def expect(self, name, args, rc_ok, *texts):
        """Runs args; exit 0 expected when rc_ok; each text in the output. Returns the output."""
        rc, out = self.run(*args)
        if (rc == 0) != rc_ok:
            self.failures.append(f"{name}: exit {rc}, expected {'0' if rc_ok else 'non-zero'}:\n{out}")
        for t in texts:
            if t not in out:
                self.failures.append(f"{name}: no '{t}' in:\n{out}")
        print(f"{name}: exit {rc}")
        return out

    def finish(self, script):
        for f in self.failures:
            print("FAIL:", f)
        print(f"{script}: " + ("FAIL" if self.failures else "PASS"))
        sys.exit(1 if self.failures else 0)
