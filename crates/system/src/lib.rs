//! The home of PMS's whole-system tests (`tests/it`): the users, parks and payments services
//! with their events in process, behind the real gateway and its shipped route table, driven by
//! real HTTP/1.1 and HTTP/2 clients, on SQLite and on a real PostgreSQL. A test that needs more
//! than one service belongs here, so that no service's crate depends on the others for its
//! tests. The crate itself has no code.
