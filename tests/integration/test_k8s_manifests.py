#!/usr/bin/python3
"""e2e_k8s_manifests: deploy/k8s/*.yaml, docker-compose.yml and
deploy/prometheus/prometheus.yml agree with the Kubernetes schemas and with
the binaries. No cluster runs.

  - npm installs kubernetes-models, yaml and typescript into
    BUILD/k8s-validate (once; reruns reuse it);
  - test_k8s_manifests.mjs validates every manifest document against the API
    schema of its kind and type-checks it strictly (unknown fields fail);
  - every flag a manifest or the compose file passes to meshserve-coordinator
    or meshserve-worker is in that binary's --help; --port / --http_port equal
    the containerPorts, the grpc probes' port, the Services' ports and the
    prometheus.io/port annotation; the workers' --advertise is their stable
    pod DNS name under the StatefulSet's headless Service; --coordinator names
    the coordinator Service; a worker's CPU request equals its --cores;
  - prometheus.yml scrapes the ports the compose file passes (and `promtool
    check config` accepts it when promtool is installed).
Exit 77 (skipped) when node or npm is missing.

Usage: test_k8s_manifests.py --bin_dir build/bin [--keep]
"""
import json
import os
import re
import shutil
import sys

import e2e_common as e2e
import mslib

K8S_DIR = os.path.join(e2e.ROOT, "deploy", "k8s")
MANIFESTS = ["coordinator.yaml", "worker.yaml"]
COMPOSE = os.path.join(e2e.ROOT, "docker-compose.yml")
PROMETHEUS = os.path.join(e2e.ROOT, "deploy", "prometheus", "prometheus.yml")
NPM_PACKAGES = ["kubernetes-models@5.1.0", "yaml@2.9.1", "typescript@5.9.3"]
VALIDATOR = os.path.join(e2e.HERE, "test_k8s_manifests.mjs")
BINARIES = ("meshserve-coordinator", "meshserve-worker")
# The compose file's roles (deploy/entrypoint.sh) -> binaries.
ROLES = {"coordinator": "meshserve-coordinator", "worker": "meshserve-worker"}


def npm_prefix(bin_dir):
    return os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "k8s-validate")


def npm_install(c, prefix):
    stamp = os.path.join(prefix, "installed.txt")
    want = " ".join(NPM_PACKAGES)
    if os.path.exists(stamp) and open(stamp).read() == want:
        c.check(True, "npm packages cached in %s" % prefix)
        return True
    os.makedirs(prefix, exist_ok=True)
    rc, out, err = mslib.run(["npm", "install", "--prefix", prefix, "--no-audit", "--no-fund",
                              "--loglevel=error"] + NPM_PACKAGES, timeout=240)
    if c.check(rc == 0, "npm install %s" % want, "    rc=%d\n%s\n%s" % (rc, out, err)):
        with open(stamp, "w") as f:
            f.write(want)
        return True
    return False


def binary_flags(bin_dir):
    """{binary: set of flag names in its --help}."""
    flags = {}
    for b in BINARIES:
        _, out, err = mslib.run([os.path.join(bin_dir, b), "--help"], timeout=30)
        flags[b] = set(re.findall(r"^\s+--([A-Za-z0-9_]+)\s", out + err, re.M))
    return flags


def parse_flags(args):
    """['--a=1', '--b', '2'] -> {'a': '1', 'b': '2'} (in order)."""
    out, i = {}, 0
    while i < len(args):
        m = re.match(r"^--([A-Za-z0-9_]+)(?:=(.*))?$", str(args[i]))
        if not m:
            raise ValueError("not a flag: %r in %s" % (args[i], args))
        if m.group(2) is not None:
            out[m.group(1)] = m.group(2)
        else:
            out[m.group(1)] = str(args[i + 1])
            i += 1
        i += 1
    return out


def check_flags_exist(c, where, binary, flags, known):
    for name in flags:
        c.check(name in known[binary], "%s: --%s is a flag of %s" % (where, name, binary),
                "    %s --help has %s" % (binary, sorted(known[binary])))


def pod_templates(docs):
    """[(kind/name, workload doc, its container running a meshserve binary, flags)]."""
    out = []
    for doc in docs:
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            binary = container["command"][0]
            out.append(("%s/%s" % (doc["kind"], doc["metadata"]["name"]), doc, container, binary,
                        parse_flags(container.get("args", []))))
    return out


def services_for(docs, labels):
    return [d for d in docs if d["kind"] == "Service" and d["spec"].get("selector") and all(
        labels.get(k) == v for k, v in d["spec"]["selector"].items())]


def check_workload(c, docs, where, doc, container, binary, flags, known):
    check_flags_exist(c, where, binary, flags, known)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    grpc_port = int(flags["port"])
    c.check(ports.get("grpc") == grpc_port, "%s: containerPort grpc == --port %d" % (where, grpc_port),
            "    ports %s" % ports)
    for probe in ("readinessProbe", "livenessProbe"):
        p = container.get(probe, {}).get("grpc", {})
        c.check(p.get("port") == grpc_port, "%s: %s is grpc.health.v1 on --port" % (where, probe),
                "    %s: %s" % (probe, container.get(probe)))
    http_port = int(flags["http_port"])
    annotations = doc["spec"]["template"]["metadata"].get("annotations", {})
    c.check(http_port in ports.values() and annotations.get("prometheus.io/scrape") == "true"
            and annotations.get("prometheus.io/port") == str(http_port),
            "%s: --http_port %d is a containerPort and the prometheus.io/port" % (where, http_port),
            "    ports %s annotations %s" % (ports, annotations))
    labels = doc["spec"]["template"]["metadata"]["labels"]
    c.check(doc["spec"]["selector"]["matchLabels"].items() <= labels.items(),
            "%s: the selector matches the pod template" % where)
    services = services_for(docs, labels)
    c.check(services, "%s: a Service selects its pods" % where)
    for svc in services:
        for sp in svc["spec"]["ports"]:
            target = sp.get("targetPort", sp["port"])
            number = ports.get(target) if isinstance(target, str) else target
            c.check(number == sp["port"] and number in ports.values(),
                    "Service/%s port %s: %d -> the container's %s" % (
                        svc["metadata"]["name"], sp.get("name"), sp["port"], target),
                    "    container ports %s" % ports)
    return services


def check_worker(c, docs, where, doc, container, flags):
    svc_name = doc["spec"]["serviceName"]
    headless = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == svc_name]
    c.check(headless and headless[0]["spec"].get("clusterIP") == "None",
            "%s: serviceName %s is a headless Service" % (where, svc_name))
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in container.get("env", [])}
    want = "$(POD_NAME).%s.$(POD_NAMESPACE).svc.cluster.local:%s" % (svc_name, flags["port"])
    c.check(flags.get("advertise") == want and env.get("POD_NAME") == "metadata.name"
            and env.get("POD_NAMESPACE") == "metadata.namespace",
            "%s: --advertise is the pod's stable DNS name %s" % (where, want),
            "    --advertise=%s env %s" % (flags.get("advertise"), env))
    cpu = container["resources"]["requests"]["cpu"]
    c.check(str(cpu) == flags.get("cores"), "%s: CPU request %s == --cores" % (where, cpu),
            "    --cores=%s" % flags.get("cores"))
    host, _, port = flags["coordinator"].rpartition(":")
    coord = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == host]
    c.check(coord and any(p["port"] == int(port) and p.get("name") == "grpc"
                          for p in coord[0]["spec"]["ports"]),
            "%s: --coordinator %s is the coordinator Service's grpc port" % (where, flags["coordinator"]))
    return doc["spec"]["replicas"]


def run_validator(c, prefix, files, plain):
    rc, out, err = mslib.run(["node", VALIDATOR, prefix] + files + ["--plain"] + plain,
                             timeout=120)
    if not c.check(rc == 0, "test_k8s_manifests.mjs ran", "    rc=%d\n%s\n%s" % (rc, out, err)):
        return None
    result = json.loads(out)
    for e in result["errors"]:
        c.check(False, "schema: " + e.splitlines()[0], e)
    c.check(not result["errors"], "every document matches its Kubernetes schema, strictly")
    return result


def check_manifests(env, result, known):
    c = env.c
    docs = [d["doc"] for d in result["docs"]]
    kinds = sorted("%s/%s" % (d["kind"], d["metadata"]["name"]) for d in docs)
    c.check(kinds == ["Deployment/meshserve-coordinator", "Service/meshserve-coordinator",
                      "Service/meshserve-worker", "StatefulSet/meshserve-worker"],
            "the manifests: coordinator Deployment + Service, worker StatefulSet + Service",
            "    got %s" % kinds)
    replicas, min_workers = None, None
    for where, doc, container, binary, flags in pod_templates(docs):
        c.check(binary in BINARIES, "%s runs %s" % (where, binary))
        check_workload(c, docs, where, doc, container, binary, flags, known)
        if binary == "meshserve-worker":
            replicas = check_worker(c, docs, where, doc, container, flags)
        else:
            min_workers = int(flags.get("min_workers", 1))
    c.check(replicas is not None and min_workers is not None and min_workers <= replicas,
            "--min_workers %s <= the worker replicas %s" % (min_workers, replicas))


def check_compose(env, result, known):
    c = env.c
    compose, prometheus = [d["doc"] for d in result["plain"]]
    services = compose["services"]
    http = {}
    for role, binary in ROLES.items():
        command = services[role]["command"]
        c.check(command[0] == role, "compose %s runs the %s role" % (role, role))
        flags = parse_flags(command[1:])
        check_flags_exist(c, "compose " + role, binary, flags, known)
        http[role] = int(flags["http_port"])
    c.check("%d:%d" % (http["coordinator"], http["coordinator"]) in services["coordinator"]["ports"],
            "compose publishes the coordinator's --http_port %d" % http["coordinator"],
            "    ports %s" % services["coordinator"]["ports"])
    prom = services.get("prometheus", {})
    c.check(prom.get("profiles") == ["metrics"], "compose: prometheus is the 'metrics' profile")
    targets = []
    for job in prometheus["scrape_configs"]:
        for sc in job.get("static_configs", []):
            targets += sc["targets"]
        for dc in job.get("dns_sd_configs", []):
            targets += ["%s:%d" % (n, dc["port"]) for n in dc["names"]]
    for role in ROLES:
        want = "%s:%d" % (role, http[role])
        c.check(want in targets, "prometheus.yml scrapes %s" % want, "    targets %s" % targets)
    if shutil.which("promtool"):
        rc, out, err = mslib.run(["promtool", "check", "config", PROMETHEUS], timeout=60)
        c.check(rc == 0, "promtool check config prometheus.yml", out + err)


def run(env):
    print("== deployment files vs. the schemas and the binaries", flush=True)
    prefix = npm_prefix(env.bin_dir)
    if not npm_install(env.c, prefix):
        return
    files = [os.path.join(K8S_DIR, m) for m in MANIFESTS]
    result = run_validator(env.c, prefix, files, [COMPOSE, PROMETHEUS])
    if result is None:
        return
    known = binary_flags(env.bin_dir)
    check_manifests(env, result, known)
    check_compose(env, result, known)


if __name__ == "__main__":
    if not (shutil.which("node") and shutil.which("npm")):
        print("SKIP: node and npm are needed to validate the manifests")
        sys.exit(77)
    sys.exit(e2e.main("k8s_manifests", lambda env: [("manifests", lambda: run(env))],
                      needs=BINARIES, doc=__doc__))
