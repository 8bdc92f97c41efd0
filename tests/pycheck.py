"""What the Python test scripts share: check() prints "ok" or "FAIL" for one
assertion and counts the failures; result() prints the verdict and gives the
exit code."""

failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures += 1


def result():
    print("PASS" if failures == 0 else "%d FAILED" % failures)
    return 1 if failures else 0
