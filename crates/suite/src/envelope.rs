//! The resource envelope of a suite's processes. The dissertation ran every service in a
//! container of 1 CPU and 512 MB; here each system under test gets its own control group with
//! the same CPU quota and memory limit, on the cores set apart for the systems, and the load
//! generator gets cores of its own, away from them. What the machine allows decides how:
//! - cgroup v2, when its root offers the `cpu`, `memory` and `cpuset` controllers;
//! - cgroup v1, when the `cpu`, `memory` and `cpuset` hierarchies are mounted and writable;
//! - otherwise CPU affinity alone (every thread of the process pinned; no quota, no memory
//!   limit), which the record says.
//!
//! The groups live under one directory per suite run (`pms-suite-PID`) and are removed when the
//! envelope is dropped. Setup programs (certificates, `psql`, `pgbench -i`) stay outside it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// The published containers' limits.
pub const PUBLISHED: Limits = Limits {
    cpus: 1.0,
    memory_mb: 512,
};

/// What each system under test may use.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// CPU time, in CPUs (1.0: one core's worth per period).
    pub cpus: f64,
    /// Memory, MB.
    pub memory_mb: u64,
}

/// Which side of the measurement a process is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A system under test (a service, a proxy, a back-end).
    System,
    /// The load generator.
    Load,
}

impl Role {
    /// The role of a process by the name the suite gives it; `None` for setup programs, which
    /// stay outside the envelope.
    pub fn of(name: &str) -> Option<Self> {
        match name {
            "load" | "pgbench" => Some(Self::Load),
            "certs" | "psql" | "pgbench -i" => None,
            _ => Some(Self::System),
        }
    }
}

/// What a run recorded about its envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `cgroup-v2`, `cgroup-v1` or `affinity`.
    pub mechanism: String,
    /// The limits of each system under test (`None` with affinity alone).
    pub limits: Option<Limits>,
    /// Cores of the systems under test.
    pub system_cpus: Vec<usize>,
    /// Cores of the load generator.
    pub load_cpus: Vec<usize>,
}

/// One sentence on a run's envelope, for the reports.
pub fn describe(record: Option<&Record>) -> String {
    let Some(r) = record else {
        return "none: every process could use every core and all memory".into();
    };
    let cores = |c: &[usize]| {
        let l = list(c);
        if c.len() == 1 {
            format!("core {l}")
        } else {
            format!("cores {l}")
        }
    };
    let limits = match r.limits {
        Some(l) => format!(
            "each system under test in its own {} group of {} CPU and {} MB",
            r.mechanism, l.cpus, l.memory_mb
        ),
        None => "CPU affinity only (no control groups here: no CPU quota, no memory limit)".into(),
    };
    format!(
        "{limits}, on {}; the load generator on {}",
        cores(&r.system_cpus),
        cores(&r.load_cpus)
    )
}

#[derive(Debug)]
enum Mechanism {
    V2 { base: PathBuf },
    V1 { roots: [PathBuf; 3] },
    Affinity,
}

/// The envelope of one suite run.
#[derive(Debug)]
pub struct Envelope {
    limits: Limits,
    mechanism: Mechanism,
    system_cpus: Vec<usize>,
    load_cpus: Vec<usize>,
    next: AtomicUsize,
    made: Mutex<Vec<PathBuf>>,
}

/// The cores this process may run on.
fn own_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

/// Splits `cpus` into the systems' and the load generator's: a quarter (at least one) for the
/// load, the rest for the systems; with one core they share it.
pub fn split(cpus: &[usize]) -> (Vec<usize>, Vec<usize>) {
    if cpus.len() < 2 {
        return (cpus.to_vec(), cpus.to_vec());
    }
    let load = (cpus.len() / 4).max(1);
    let (system, load) = cpus.split_at(cpus.len() - load);
    (system.to_vec(), load.to_vec())
}

fn list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("writing {value:?} to {}: {e}", path.display()))
}

fn make_dir(path: &Path) -> Result<(), String> {
    std::fs::create_dir(path).map_err(|e| format!("creating {}: {e}", path.display()))
}

impl Envelope {
    /// The envelope `limits` on this machine, by the best mechanism it allows.
    pub fn new(limits: Limits) -> Self {
        let (system_cpus, load_cpus) = split(&own_cpus());
        let tag = format!("pms-suite-{}", std::process::id());
        let mechanism = v2(&tag, &system_cpus)
            .or_else(|| v1(&tag))
            .unwrap_or(Mechanism::Affinity);
        let made = match &mechanism {
            Mechanism::V2 { base } => vec![base.clone()],
            Mechanism::V1 { roots } => roots.iter().map(|r| r.join(&tag)).collect(),
            Mechanism::Affinity => Vec::new(),
        };
        Self {
            limits,
            mechanism,
            system_cpus,
            load_cpus,
            next: AtomicUsize::new(0),
            made: Mutex::new(made),
        }
    }

    /// What to write in `results.json` and the report.
    pub fn record(&self) -> Record {
        let (mechanism, limits) = match self.mechanism {
            Mechanism::V2 { .. } => ("cgroup-v2", Some(self.limits)),
            Mechanism::V1 { .. } => ("cgroup-v1", Some(self.limits)),
            Mechanism::Affinity => ("affinity", None),
        };
        Record {
            mechanism: mechanism.into(),
            limits,
            system_cpus: self.system_cpus.clone(),
            load_cpus: self.load_cpus.clone(),
        }
    }

    /// Puts process `pid` (just started, named `name`) in its place for `role`.
    ///
    /// # Errors
    /// A group could not be made or joined, or the affinity set.
    pub fn place(&self, pid: u32, name: &str, role: Role) -> Result<(), String> {
        let cpus = match role {
            Role::System => &self.system_cpus,
            Role::Load => &self.load_cpus,
        };
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let leaf = format!(
            "{n}-{}",
            name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        );
        let quota = (self.limits.cpus * 100_000.0).round() as u64;
        let bytes = self.limits.memory_mb * 1024 * 1024;
        match &self.mechanism {
            Mechanism::V2 { base } => {
                let dir = base.join(&leaf);
                make_dir(&dir)?;
                self.remember(&dir);
                write(&dir.join("cpuset.cpus"), &list(cpus))?;
                if role == Role::System {
                    write(&dir.join("cpu.max"), &format!("{quota} 100000"))?;
                    write(&dir.join("memory.max"), &bytes.to_string())?;
                }
                write(&dir.join("cgroup.procs"), &pid.to_string())
            }
            Mechanism::V1 { roots } => {
                let [cpu, memory, cpuset] = roots;
                let tag = format!("pms-suite-{}", std::process::id());
                let set = cpuset.join(&tag).join(&leaf);
                make_dir(&set)?;
                self.remember(&set);
                write(&set.join("cpuset.cpus"), &list(cpus))?;
                let mems = std::fs::read_to_string(cpuset.join("cpuset.mems"))
                    .map_err(|e| format!("reading cpuset.mems: {e}"))?;
                write(&set.join("cpuset.mems"), mems.trim())?;
                write(&set.join("cgroup.procs"), &pid.to_string())?;
                if role == Role::System {
                    let c = cpu.join(&tag).join(&leaf);
                    make_dir(&c)?;
                    self.remember(&c);
                    write(&c.join("cpu.cfs_period_us"), "100000")?;
                    write(&c.join("cpu.cfs_quota_us"), &quota.to_string())?;
                    write(&c.join("cgroup.procs"), &pid.to_string())?;
                    let m = memory.join(&tag).join(&leaf);
                    make_dir(&m)?;
                    self.remember(&m);
                    write(&m.join("memory.limit_in_bytes"), &bytes.to_string())?;
                    write(&m.join("cgroup.procs"), &pid.to_string())?;
                }
                Ok(())
            }
            Mechanism::Affinity => pin(pid, cpus),
        }
    }

    /// Pins the calling thread (and the threads it starts from now on) to the load cores: the
    /// suite's own process when it is the load generator (the parking suite's barriers).
    pub fn pin_self_to_load(&self) {
        let _ = rustix::thread::sched_setaffinity(None, &cpu_set(&self.load_cpus));
    }

    fn remember(&self, dir: &Path) {
        if let Ok(mut made) = self.made.lock() {
            made.push(dir.to_owned());
        }
    }
}

impl Drop for Envelope {
    fn drop(&mut self) {
        // Leaves first (made after their parents), then the run's own directories; a group
        // with a process still in it stays, and rmdir says so to no one.
        if let Ok(made) = self.made.lock() {
            for dir in made.iter().rev() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

fn cpu_set(cpus: &[usize]) -> rustix::thread::CpuSet {
    let mut set = rustix::thread::CpuSet::new();
    for &c in cpus {
        set.set(c);
    }
    set
}

/// Pins every thread of `pid` to `cpus` (threads it starts later inherit it).
fn pin(pid: u32, cpus: &[usize]) -> Result<(), String> {
    let set = cpu_set(cpus);
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|e| format!("listing the threads of {pid}: {e}"))?;
    for task in tasks.flatten() {
        let tid = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw);
        if let Some(tid) = tid {
            rustix::thread::sched_setaffinity(Some(tid), &set)
                .map_err(|e| format!("pinning thread {tid:?} of {pid}: {e}"))?;
        }
    }
    Ok(())
}

/// cgroup v2 at `/sys/fs/cgroup`, with a directory for this run, when it offers the controllers.
fn v2(tag: &str, system: &[usize]) -> Option<Mechanism> {
    let root = Path::new("/sys/fs/cgroup");
    let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).ok()?;
    let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
    if !(has("cpu") && has("memory") && has("cpuset")) {
        return None;
    }
    write(&root.join("cgroup.subtree_control"), "+cpu +memory +cpuset").ok()?;
    let base = root.join(tag);
    make_dir(&base).ok()?;
    let ok = write(&base.join("cgroup.subtree_control"), "+cpu +memory +cpuset").is_ok()
        && !system.is_empty();
    if !ok {
        let _ = std::fs::remove_dir(&base);
        return None;
    }
    Some(Mechanism::V2 { base })
}

/// cgroup v1's `cpu`, `memory` and `cpuset` hierarchies, with a directory for this run in each.
fn v1(tag: &str) -> Option<Mechanism> {
    let root = Path::new("/sys/fs/cgroup");
    let roots = ["cpu", "memory", "cpuset"].map(|c| root.join(c));
    if !roots.iter().all(|r| r.join("cgroup.procs").exists()) {
        return None;
    }
    let mut made = Vec::new();
    for r in &roots {
        let dir = r.join(tag);
        if make_dir(&dir).is_err() {
            for d in made {
                let _ = std::fs::remove_dir(d);
            }
            return None;
        }
        made.push(dir);
    }
    // A v1 cpuset group takes processes only once its cpus and mems are set.
    let cpuset = &roots[2];
    let copy = |file: &str| {
        std::fs::read_to_string(cpuset.join(file))
            .ok()
            .and_then(|v| write(&cpuset.join(tag).join(file), v.trim()).ok())
    };
    if copy("cpuset.cpus").is_none() || copy("cpuset.mems").is_none() {
        for d in made {
            let _ = std::fs::remove_dir(d);
        }
        return None;
    }
    Some(Mechanism::V1 { roots })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_generator_gets_a_quarter_of_the_cores_and_at_least_one() {
        assert_eq!(split(&[0, 1]), (vec![0], vec![1]));
        assert_eq!(split(&[0, 1, 2, 3]), (vec![0, 1, 2], vec![3]));
        assert_eq!(
            split(&[0, 1, 2, 3, 4, 5, 6, 7]),
            (vec![0, 1, 2, 3, 4, 5], vec![6, 7])
        );
        assert_eq!(split(&[3]), (vec![3], vec![3]), "one core: shared");
    }

    #[test]
    fn setup_programs_stay_outside() {
        assert_eq!(Role::of("load"), Some(Role::Load));
        assert_eq!(Role::of("pgbench"), Some(Role::Load));
        assert_eq!(Role::of("gateway"), Some(Role::System));
        assert_eq!(Role::of("certs"), None);
        assert_eq!(Role::of("pgbench -i"), None);
    }

    #[test]
    fn a_placed_process_runs_on_its_cores() {
        let envelope = Envelope::new(PUBLISHED);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let placed = envelope.place(child.id(), "sleep", Role::Load);
        let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap());
        let got = rustix::thread::sched_getaffinity(pid);
        let cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", child.id()));
        let _ = child.kill();
        let _ = child.wait();
        placed.unwrap();
        let got = got.unwrap();
        let on: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| got.is_set(c))
            .collect();
        assert_eq!(on, envelope.record().load_cpus, "{:?}", envelope.record());
        if envelope.record().mechanism != "affinity" {
            assert!(
                cgroup.unwrap_or_default().contains("pms-suite-"),
                "in the run's group"
            );
        }
    }
}
