//! The PMS load generator: the measurements the published reports made with JMeter, k6 and
//! vegeta, made with one tool and without their known flaws.
//!
//! Layout:
//! - [`target`]: a URL, the protocol to speak and one connection to it (HTTP/1.1, h2c, HTTP/2 or
//!   HTTP/1.1 over TLS), reporting failures as [`stats::ErrorKind`]s.
//! - [`closed`]: the closed model (users in loops, ramp-up, think time, warm-up split).
//! - [`open`]: the open model (arrivals at fixed times; latency corrected for coordinated
//!   omission, late and dropped requests counted).
//! - [`stats`]: per-worker recorders over HdrHistogram (bounded memory) and the published summary
//!   statistics.
//! - [`report`]: `result.json` and the text table.
//! - [`startup`]: exec → ready time and RSS of a command, over several runs.
//! - [`watch`]: CPU and RSS of the system under test and the machine, once a second.
//! - [`payload`]: the published suite's ARRAY payload, byte for byte.
//! - [`duration`]: `30s`-style durations.
//!
//! Why no dependency on any PMS component: the generator is a black-box client; it must measure
//! nginx or the original Java services exactly as it measures PMS.

#![deny(missing_docs)]

pub mod closed;
pub mod duration;
pub mod open;
pub mod payload;
pub mod report;
pub mod startup;
pub mod stats;
pub mod target;
pub mod watch;
