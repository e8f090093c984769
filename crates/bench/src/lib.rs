//! The PMS load generator: the measurements the published reports made with JMeter, k6 and
//! vegeta, made with one tool and without their known flaws.
//!
//! Layout:
//! - [`target`]: a URL, the protocol to speak and one connection to it (HTTP/1.1, h2c, HTTP/2 or
//!   HTTP/1.1 over TLS), reporting failures as [`stats::ErrorKind`]s; [`h1`]: the HTTP/1.1 hot
//!   path (request bytes built once, one reused read buffer).
//! - [`profile`]: load over time (ramps and `--stage`s) for both models.
//! - [`closed`]: the closed model (users in loops, ramp-up and stages, think time).
//! - [`open`]: the open model (arrivals at fixed times; latency corrected for coordinated
//!   omission, late and dropped requests counted).
//! - [`collect`]: where workers record while a run goes (sharded, bounded memory), the
//!   once-a-second timeline, stop rules and the per-request CSV.
//! - [`stats`]: recorders over HdrHistogram and the published summary statistics.
//! - [`report`]: `result.json` and the text table; [`format`](mod@format): the column sets of JMeter,
//!   the Ballerina/WSO2 summary, k6 and vegeta.
//! - [`stress`]: users added at a fixed pace until the target fails.
//! - [`compare`]: the dissertation's hypothesis tests on two runs' latencies.
//! - [`import`]: JMeter, k6 and vegeta result files read as samples.
//! - [`startup`]: exec → ready time and RSS of a command, over several runs.
//! - [`watch`]: CPU and RSS of the system under test and the machine, once a second.
//! - [`duration`]: `30s`-style durations.
//!
//! The suites that rerun the published studies with this generator (components spawned, matrix
//! run, reports written) are the `pms-suite` crate's.
//!
//! Why no dependency on any PMS component: the generator is a black-box client; it must measure
//! nginx or the original Java services exactly as it measures PMS.

#![deny(missing_docs)]

pub mod closed;
pub mod collect;
pub mod compare;
pub mod duration;
pub mod format;
pub mod h1;
pub mod hpack;
pub mod http2;
pub mod import;
pub mod open;
pub mod profile;
pub mod report;
pub mod startup;
pub mod stats;
pub mod stress;
pub mod target;
pub mod watch;
