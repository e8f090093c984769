//! The whole system: real users, parks and payments services with their events in process, the
//! real gateway with the shipped route table, real HTTP/1.1 and HTTP/2 clients, on SQLite and on
//! a real PostgreSQL.

mod clock;
mod closure;
mod coins;
mod concurrency;
mod customers;
mod devices;
mod management;
mod model;
mod operator;
mod set_aside;
mod support;
mod visits;
