#!/usr/bin/env python3
"""A burst of sign-ups and logins against a running PMS, with the resident memory of its process.

    scripts/signup-burst.py --pid PID [--url http://127.0.0.1:8090] [--count 1000] [--clients 100]

Registers COUNT new customers through `POST /users/createUser`, then logs each in once through
`POST /users/login`, CLIENTS at a time, and prints per phase the answers by status and the
process's RSS (VmRSS from /proc/PID/status) before, at its peak (sampled every 50 ms) and 15 s
after. 429 and 503 answers are waited out as their `Retry-After` says and counted. The default
URL is the users service's own listener under `pms up` (the gateway's per-client limits would
pace a single client); loopback only. Standard library only.
"""

import argparse
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def plate(i: int) -> str:
    """A plate of the Portuguese AA-00-AA form, distinct for i below 67,600."""
    return f"{LETTERS[i // 26 % 26]}{LETTERS[i % 26]}-{i // 676 % 100:02d}-Z{LETTERS[i // 67600 % 26]}"


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def post(url: str, body: dict) -> tuple[int, int]:
    """Status and Retry-After (0 when absent) of a JSON POST."""
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, 0
    except urllib.error.HTTPError as e:
        return e.code, int(e.headers.get("Retry-After") or 0)


def phase(name: str, pid: int, clients: int, jobs: list) -> None:
    counts: dict[int, int] = {}
    lock = threading.Lock()
    queue = list(reversed(jobs))
    peak = [rss_kib(pid)]
    before = peak[0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(pid))
            time.sleep(0.05)

    def work() -> None:
        while True:
            with lock:
                if not queue:
                    return
                url, body = queue.pop()
            while True:
                status, wait = post(url, body)
                with lock:
                    counts[status] = counts.get(status, 0) + 1
                if status in (429, 503):
                    time.sleep(max(wait, 1))
                    continue
                break

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    threads = [threading.Thread(target=work) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    done.set()
    sampler.join()
    time.sleep(15)
    after = rss_kib(pid)
    print(
        f"{name}: {len(jobs)} in {took:.1f} s, answers {dict(sorted(counts.items()))}; "
        f"RSS before {before / 1024:.0f} MB, peak {peak[0] / 1024:.0f} MB, 15 s after {after / 1024:.0f} MB"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pid", type=int, required=True, help="the process whose RSS to watch")
    p.add_argument("--url", default="http://127.0.0.1:8090")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--first", type=int, default=int(time.time()) % 60000, help="first customer number")
    a = p.parse_args()
    host = urllib.parse.urlparse(a.url).hostname
    if host not in ("127.0.0.1", "::1", "localhost"):
        raise SystemExit("loopback only")
    customers = range(a.first, a.first + a.count)
    password = "Burst#Driver2026"
    sign_ups = [
        (
            f"{a.url}/users/createUser",
            {
                "firstName": "Burst",
                "lastName": f"Driver {i}",
                "email": f"burst{i}@burst.pms.test",
                "password": password,
                "nif": 300_000_000 + i,
                "licensePlateNumber": plate(i),
                "vehicleType": "AUTOMOBILE",
                "vehicleEnergySource": "FUEL",
            },
        )
        for i in customers
    ]
    logins = [
        (f"{a.url}/users/login", {"email": f"burst{i}@burst.pms.test", "password": password})
        for i in customers
    ]
    phase("sign-ups", a.pid, a.clients, sign_ups)
    phase("logins", a.pid, a.clients, logins)


if __name__ == "__main__":
    main()
