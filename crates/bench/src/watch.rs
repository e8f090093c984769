//! Who used the machine during a run: once a second, the CPU share and RSS of each watched
//! process (the system under test) and the whole machine's CPU use and load average, read from
//! `/proc`. On a shared 2-core host a reader must be able to see that the load generator and the
//! target competed for the same cores. Linux only; elsewhere the samples are empty.

use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

/// One second of one watched process.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize)]
pub struct ProcessSample {
    /// Seconds since the run started.
    pub t_s: f64,
    /// CPU used over the last interval, percent of one core (200 % = two cores busy).
    pub cpu_pct: f64,
    /// Resident set size, KiB.
    pub rss_kib: u64,
}

/// One second of the machine.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize)]
pub struct MachineSample {
    /// Seconds since the run started.
    pub t_s: f64,
    /// Busy share of all cores over the last interval, percent (100 % = every core busy).
    pub cpu_pct: f64,
    /// One-minute load average.
    pub load1: f64,
}

/// What a watched process did over the run.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ProcessReport {
    /// The pid.
    pub pid: u32,
    /// Mean CPU, percent of one core.
    pub cpu_mean_pct: f64,
    /// Largest RSS seen, KiB.
    pub rss_max_kib: u64,
    /// Mean RSS, KiB.
    pub rss_mean_kib: f64,
    /// The time series.
    pub samples: Vec<ProcessSample>,
}

/// Everything watched over a run.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct WatchReport {
    /// Per watched process.
    pub processes: Vec<ProcessReport>,
    /// Mean machine CPU, percent of all cores.
    pub machine_cpu_mean_pct: f64,
    /// The machine's time series.
    pub machine: Vec<MachineSample>,
}

/// Samples `pids` and the machine every `interval` until `stop` turns true, and once more then.
pub async fn sample(
    pids: Vec<u32>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) -> WatchReport {
    let start = tokio::time::Instant::now();
    let ticks_per_s = 100.0; // USER_HZ on Linux
    let mut last_proc: Vec<Option<u64>> = pids.iter().map(|p| proc_ticks(*p)).collect();
    let mut last_cpu = machine_ticks();
    let mut series: Vec<Vec<ProcessSample>> = vec![Vec::new(); pids.len()];
    let mut machine = Vec::new();
    let mut last_t = start;
    loop {
        // One last sample when the run ends, so even a run shorter than the interval has one.
        let stopping = tokio::select! {
            _ = stop.wait_for(|s| *s) => true,
            () = tokio::time::sleep(interval) => false,
        };
        let now = tokio::time::Instant::now();
        let dt = now.duration_since(last_t).as_secs_f64().max(1e-6);
        last_t = now;
        let t_s = now.duration_since(start).as_secs_f64();
        for (i, pid) in pids.iter().enumerate() {
            let ticks = proc_ticks(*pid);
            if let (Some(now_t), Some(prev)) = (ticks, last_proc[i]) {
                series[i].push(ProcessSample {
                    t_s,
                    cpu_pct: (now_t.saturating_sub(prev)) as f64 / ticks_per_s / dt * 100.0,
                    rss_kib: crate::startup::rss_kib(*pid).unwrap_or(0),
                });
            }
            last_proc[i] = ticks;
        }
        let cpu = machine_ticks();
        if let (Some((busy, total)), Some((pbusy, ptotal))) = (cpu, last_cpu) {
            let dt_total = total.saturating_sub(ptotal).max(1);
            machine.push(MachineSample {
                t_s,
                cpu_pct: busy.saturating_sub(pbusy) as f64 * 100.0 / dt_total as f64,
                load1: load1().unwrap_or(0.0),
            });
        }
        last_cpu = cpu;
        if stopping {
            break;
        }
    }
    let processes = pids
        .iter()
        .zip(series)
        .map(|(pid, samples)| {
            let n = samples.len().max(1) as f64;
            ProcessReport {
                pid: *pid,
                cpu_mean_pct: samples.iter().map(|s| s.cpu_pct).sum::<f64>() / n,
                rss_max_kib: samples.iter().map(|s| s.rss_kib).max().unwrap_or(0),
                rss_mean_kib: samples.iter().map(|s| s.rss_kib as f64).sum::<f64>() / n,
                samples,
            }
        })
        .collect();
    let n = machine.len().max(1) as f64;
    WatchReport {
        processes,
        machine_cpu_mean_pct: machine.iter().map(|s| s.cpu_pct).sum::<f64>() / n,
        machine,
    }
}

/// utime + stime of a process, in clock ticks.
fn proc_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// (busy, total) jiffies of all cores from `/proc/stat`.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().sum();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

fn load1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_busy_process_shows_cpu_and_rss() {
        // Watch this test process while it spins for a while.
        let (stop_tx, stop_rx) = watch::channel(false);
        let pid = std::process::id();
        let sampler = tokio::spawn(sample(vec![pid], Duration::from_millis(200), stop_rx));
        let spin = std::thread::spawn(|| {
            let until = std::time::Instant::now() + Duration::from_millis(700);
            let mut x = 0u64;
            while std::time::Instant::now() < until {
                x = x.wrapping_add(1);
            }
            x
        });
        let _ = tokio::task::spawn_blocking(move || spin.join()).await;
        let _ = stop_tx.send(true);
        let report = sampler.await.unwrap();
        let me = &report.processes[0];
        assert_eq!(me.pid, pid);
        assert!(!me.samples.is_empty());
        assert!(me.rss_max_kib > 0);
        assert!(me.cpu_mean_pct > 0.0, "{me:?}");
        assert!(!report.machine.is_empty());
        assert!(report
            .machine
            .iter()
            .all(|m| (0.0..=100.0).contains(&m.cpu_pct)));
    }

    #[test]
    fn process_stat_parses_with_spaces_in_the_name() {
        assert!(proc_ticks(std::process::id()).is_some());
        assert!(proc_ticks(u32::MAX).is_none());
    }
}
