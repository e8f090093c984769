//! Integration tests of the users service: real service, real gateway (the shipped route table),
//! real SQLite files and real PostgreSQL servers, real HTTP/1.1, HTTP/2 and TLS clients.

mod api;
mod awards;
mod closure;
mod concurrency;
mod outage;
mod overload;
mod pool;
mod security;
mod support;
