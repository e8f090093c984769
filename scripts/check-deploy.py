#!/usr/bin/env python3
"""Checks the Kubernetes deployment (deploy/helm/pms) offline, with real tools and the real binary.

  scripts/check-deploy.py HELM PMS            check everything (CI: scripts/test.sh)
  scripts/check-deploy.py HELM PMS --update   regenerate the chart's gateway.toml and the
                                              rendered golden files, then check

1. The chart's route table (files/gateway.toml) is config/gateway.toml with listeners on all
   interfaces and upstreams by Service name: one route table, not two.
2. `helm lint --strict` with the default and the HA values.
3. `helm template` of both equals the golden files in deploy/rendered (a change shows as a diff).
4. `kubernetes-validate --strict` on the golden files: every object against the schemas of the
   Kubernetes version the package ships (offline).
5. Against the binary: every flag a container passes is one its subcommand takes (`--help`),
   every environment variable is one the binary reads, every probe and Service port names a
   declared container port; then each container runs for real on loopback (its listen
   addresses moved to free ports, SQLite in a temporary directory, throwaway secrets) and every
   probe path it declares answers 200.
"""

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "pms"
RENDERED = ROOT / "deploy" / "rendered"
VALUES = {"default": [], "ha": ["-f", str(CHART / "values-ha.yaml")]}
# The Kubernetes version rendered for (a Helm built from source assumes an old one).
KUBE_VERSION = "1.33.0"
# Read by the binary outside any subcommand's flags: where each is read.
PROCESS_ENV = {
    "PMS_LOG": "crates/pms/src/main.rs",
    "PMS_LOG_FORMAT": "crates/pms/src/main.rs",
    "PMS_SEED_PASSWORD": "crates/pms/src/cmd/users.rs",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "crates/service/src/telemetry.rs",
}

problems = []


def gateway_toml() -> str:
    """config/gateway.toml as the chart ships it."""
    out = [
        "# Generated from config/gateway.toml by scripts/check-deploy.py --update: edit that file.",
        "# In the cluster: listeners on all interfaces, each upstream's endpoints discovered from its",
        "# headless Service (one per ready pod, re-resolved every 5 s).",
    ]
    upstream = None
    for line in (ROOT / "config" / "gateway.toml").read_text().splitlines():
        if line.startswith("[") and line.strip() != "[[upstreams]]":
            upstream = None
        if line.strip() == "[[upstreams]]":
            upstream = ""
        m = re.match(r'name = "(\w+)"', line)
        if upstream == "" and m:
            upstream = m.group(1)
        if line == 'listen = "127.0.0.1:9901"':
            line = 'listen = "0.0.0.0:{{ .Values.gateway.adminPort }}"'
        elif line == 'listen = "127.0.0.1:9090"':
            line = 'listen = "0.0.0.0:{{ .Values.gateway.port }}"'
        elif line.startswith("endpoints = ") and upstream:
            line = (
                f'discover = {{ dns = "http://{{{{ include "pms.fullname" . }}}}-{upstream}:'
                f'{{{{ .Values.{upstream}.port }}}}" }}'
            )
        if "127.0.0.1" in line and not line.lstrip().startswith("#"):
            problems.append(f"config/gateway.toml: no cluster address for: {line}")
        out.append(line)
    return "\n".join(out) + "\n"


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def render(helm: str, name: str) -> str:
    r = run([helm, "template", "pms", str(CHART), "--kube-version", KUBE_VERSION, *VALUES[name]])
    if r.returncode != 0:
        problems.append(f"helm template ({name}): {r.stderr.strip()}")
    return r.stdout


def free_port() -> int:
    # Below the kernel's ephemeral range: a released bind(0) port can be taken by a connection.
    while True:
        port = 10000 + secrets.randbelow(20000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue


def env_is_read(name: str, sub: str, help_text: str, config: str) -> bool:
    if name in help_text or (sub == "gateway" and f'"{name}"' in config):
        return True
    where = PROCESS_ENV.get(name)
    return bool(where) and f'"{name}"' in (ROOT / where).read_text()


def check_against_binary(pms: str, docs: list) -> None:
    config = next(
        (d["data"]["gateway.toml"] for d in docs if d["kind"] == "ConfigMap"), ""
    )
    services = [d for d in docs if d["kind"] == "Service"]
    for dep in (d for d in docs if d["kind"] == "Deployment"):
        spec = dep["spec"]["template"]["spec"]
        for c in spec["containers"]:
            where = f"{dep['metadata']['name']}/{c['name']}"
            sub, flags = c["args"][0], [a for a in c["args"][1:] if a.startswith("--")]
            help_text = run([pms, sub, "--help"]).stdout
            for f in flags:
                if not re.search(rf"(^|\s){re.escape(f)}(\s|$|=)", help_text, re.M):
                    problems.append(f"{where}: `pms {sub}` takes no {f}")
            for e in c.get("env", []):
                if not env_is_read(e["name"], sub, help_text, config):
                    problems.append(f"{where}: the binary does not read {e['name']}")
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            probes = [c[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")]
            for p in probes:
                if p["port"] not in ports:
                    problems.append(f"{where}: a probe names port {p['port']}, not declared")
            for s in services:
                if s["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]:
                    for sp in s["spec"]["ports"]:
                        if sp["targetPort"] not in ports:
                            problems.append(f"{s['metadata']['name']}: targets undeclared port {sp['targetPort']}")
            serve_probes(pms, where, c, ports, probes, config)


def serve_probes(pms: str, where: str, c: dict, ports: dict, probes: list, config: str) -> None:
    """Runs the container's command on loopback and asks each probe path."""
    local = {name: free_port() for name in ports}
    moved = {f"0.0.0.0:{port}": f"127.0.0.1:{local[name]}" for name, port in ports.items()}
    with tempfile.TemporaryDirectory(prefix="pms-deploy-") as tmp:
        args = []
        for a in c["args"]:
            if a in moved:
                a = moved[a]
            elif a == "/var/lib/pms":
                a = tmp
            elif a == "/etc/pms/gateway.toml":
                text = config
                for old, new in moved.items():
                    text = text.replace(old, new)
                a = os.path.join(tmp, "gateway.toml")
                Path(a).write_text(text)
            elif a.startswith("http://") and "-gateway:" in a:
                a = "http://127.0.0.1:1"
            args.append(a)
        env = {"PATH": os.environ.get("PATH", ""), "PMS_LOG": "warn"}
        for e in c.get("env", []):
            if "value" in e and e["name"] != "PMS_NATS_URL":
                env[e["name"]] = e["value"]
            elif e["name"] in ("PMS_JWT_SECRET", "PMS_DEVICE_SECRET", "PMS_FORWARDER_KEY"):
                env[e["name"]] = secrets.token_hex(32)
            # Database and broker URLs stay unset: SQLite in the temporary directory, no broker.
        proc = subprocess.Popen([pms, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            for p in probes:
                url = f"http://127.0.0.1:{local[p['port']]}{p['path']}"
                deadline = time.monotonic() + 30
                status = None
                while time.monotonic() < deadline and proc.poll() is None:
                    try:
                        with urllib.request.urlopen(url, timeout=2) as r:
                            status = r.status
                    except OSError as e:
                        status = getattr(e, "code", None)
                    if status == 200:
                        break
                    time.sleep(0.2)
                if status != 200:
                    err = proc.stderr.read() if proc.poll() is not None else ""
                    problems.append(f"{where}: {p['path']} on port {p['port']} answered {status} {err.strip()[-300:]}")
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__)
        return 64
    helm, pms = sys.argv[1], str(Path(sys.argv[2]).resolve())
    update = "--update" in sys.argv[3:]
    chart_toml = CHART / "files" / "gateway.toml"
    wanted = gateway_toml()
    if update:
        chart_toml.write_text(wanted)
    elif chart_toml.read_text() != wanted:
        problems.append(f"{chart_toml.relative_to(ROOT)} is not config/gateway.toml's: run scripts/check-deploy.py HELM PMS --update")
    for name, extra in VALUES.items():
        r = run([helm, "lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART), *extra])
        if r.returncode != 0:
            problems.append(f"helm lint --strict ({name}): {r.stdout.strip()} {r.stderr.strip()}")
    validate = shutil.which("kubernetes-validate") or "kubernetes-validate"
    for name in VALUES:
        text = render(helm, name)
        golden = RENDERED / f"{name}.yaml"
        if update:
            golden.write_text(text)
        elif golden.read_text() != text:
            problems.append(f"{golden.relative_to(ROOT)} differs from helm template: run scripts/check-deploy.py HELM PMS --update and review the diff")
        r = run([validate, "--strict", str(golden)])
        if r.returncode != 0:
            problems.append(f"kubernetes-validate ({name}): {r.stdout.strip()} {r.stderr.strip()}")
        docs = [d for d in yaml.safe_load_all(text) if d]
        kinds = sorted({d["kind"] for d in docs})
        print(f"{name}: {len(docs)} objects ({', '.join(kinds)})")
        check_against_binary(pms, docs)
    if problems:
        print("FAIL deploy")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("deploy: chart linted, rendered as golden, schema-valid, and every flag, variable, port and probe checked against the binary")
    return 0


if __name__ == "__main__":
    sys.exit(main())
