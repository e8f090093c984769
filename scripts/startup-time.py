#!/usr/bin/env python3
"""Time from exec to the first HTTP 200 on a readiness URL, and RSS at that moment.

    scripts/startup-time.py [--runs N] --ready http://127.0.0.1:9901/readyz -- CMD ARGS...

Each run starts CMD, polls the URL over a raw socket every 0.2 ms until it answers 200, reads the
process's VmRSS, then stops it with SIGTERM and waits. Prints mean, median, min, max, stdev.
(`pms bench startup` will replace this once the load generator exists.)
"""
import argparse
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse


def ready(host, port, path):
    try:
        with socket.create_connection((host, port), timeout=1) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n".encode())
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    url = urllib.parse.urlsplit(a.ready)
    if not cmd or url.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("usage: startup-time.py --ready http://127.0.0.1:PORT/PATH -- CMD ARGS (loopback only)")
    times, rss = [], []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not ready(url.hostname, url.port, url.path or "/"):
            if p.poll() is not None or time.perf_counter() - t0 > a.timeout:
                p.kill()
                sys.exit(f"never ready (exit code {p.poll()})")
            time.sleep(0.0002)
        times.append((time.perf_counter() - t0) * 1000)
        with open(f"/proc/{p.pid}/status") as f:
            rss.append(int(f.read().split("VmRSS:")[1].split()[0]) / 1024)
        p.terminate()
        p.wait()
    print(f"runs {len(times)}: ready after mean {statistics.mean(times):.2f} ms, "
          f"median {statistics.median(times):.2f}, min {min(times):.2f}, max {max(times):.2f}, "
          f"stdev {statistics.pstdev(times):.2f}; RSS at ready median {statistics.median(rss):.1f} MB")


if __name__ == "__main__":
    main()
