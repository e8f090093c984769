//! One request relayed by the fast path: the body gathered or streamed, the request sent over a
//! pooled upstream connection, the answer relayed back ([`super::relay`]); a body that streams
//! goes up while the answer comes back (full duplex).

use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use http::Method;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::relay::{Relay, Relaying};
use super::upload::Upload;
use super::{request, Buffers, Failure};
use crate::body::BodyStalled;
use crate::h1up::pool::{Conn, Pool};
use crate::h1up::{self, read_head, send_whole, NoHead, Resend, Whole, GATHER};
use crate::headers::RequestId;
use crate::pipeline::Shared;
use crate::respond::GatewayError;
use crate::upstream::Upstream;

/// One request relayed to an upstream and its response back.
pub(super) struct Exchange<'a> {
    pub(super) shared: &'a Shared,
    pub(super) head: &'a request::Head,
    /// Where the `Host` line goes in the upstream head: see [`h1up::head::insert_host`].
    pub(super) host_at: usize,
    pub(super) request_id: &'a RequestId,
    pub(super) pool: &'a Arc<Pool>,
    pub(super) upstream: &'a Upstream,
    /// Whether the request may go to another endpoint after a 503.
    pub(super) resend_after_503: bool,
}

impl Exchange<'_> {
    fn bad_gateway(&self, reason: impl Into<String>, consumed: bool) -> Failure {
        Failure::Answer {
            err: h1up::bad_gateway(self.upstream, reason),
            consumed,
        }
    }

    fn timeout(&self, consumed: bool) -> Failure {
        Failure::Answer {
            err: h1up::timed_out(self.upstream),
            consumed,
        }
    }

    /// Sends the request (head, then the body from `buf` and the client) and relays the
    /// response; `answered` gets its status and when its head was ready.
    pub(super) async fn run<IO>(
        &self,
        io: &mut IO,
        bufs: &mut Buffers,
        answered: &mut Option<(u16, Instant)>,
    ) -> Result<Done, Failure>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send,
    {
        self.gather_body(io, &mut bufs.buf).await?;
        let (mut conn, held) = self.checkout(bufs).await?;
        // `held` is at most the body's length.
        let streamed = self.head.body - held as u64;
        if streamed > 0 {
            // All of `buf` is the body's start.
            return self.duplex(io, conn, streamed, bufs, answered).await;
        }
        // The whole body is in `buf` behind the head: the request can be sent again.
        let resend = Resend {
            idempotent: self.head.idempotent(),
            after_503: self.resend_after_503,
        };
        let head_request = self.head.method == Method::HEAD;
        let Buffers {
            buf,
            fields,
            up,
            out,
            deadline,
        } = &mut *bufs;
        let request = Whole {
            head: out,
            body: &buf[..held],
            head_request,
            resend,
        };
        let sent = send_whole(self.pool, &mut conn, request, up, fields, deadline).await;
        // The body is off the client connection, whatever became of it: what follows it in
        // `buf` is the client's next request.
        buf.advance(held);
        Buffers::release(buf);
        let head = sent.map_err(|no| self.no_head(no, true))?;
        *answered = Some((head.status.as_u16(), Instant::now()));
        let close = !self.head.keep_alive;
        let reusable = match self
            .relaying(close)
            .relay(io, &mut conn.stream, &head, bufs)
            .await
        {
            Ok(reusable) => reusable,
            Err(Relay::Unsent(err)) => {
                // Nothing of the response went out: the client gets the error instead.
                *answered = None;
                return Err(Failure::Answer {
                    err,
                    consumed: true,
                });
            }
            Err(Relay::Broken(failure)) => return Err(failure),
        };
        io.flush().await.map_err(|_| Failure::Abort)?;
        // Bytes past the end of the response: the upstream cannot be trusted with another.
        if reusable && bufs.up.is_empty() {
            self.pool.checkin(conn);
        }
        Ok(Done::Whole)
    }

    /// Reads a body of up to [`GATHER`] bytes whole into `buf` before an upstream connection is
    /// taken, so a slow client does not hold one.
    async fn gather_body<IO>(&self, io: &mut IO, buf: &mut BytesMut) -> Result<(), Failure>
    where
        IO: AsyncRead + Unpin,
    {
        let body = self.head.body;
        if body <= buf.len() as u64 || body > GATHER as u64 {
            return Ok(());
        }
        let limit = self.upstream.request_timeout();
        // At most GATHER, so it fits in usize.
        match tokio::time::timeout(limit, h1up::gather(io, buf, body as usize)).await {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false) | Err(_)) => Err(Failure::Abort),
            Err(_) => Err(Failure::Answer {
                err: GatewayError::SlowBody {
                    after_ms: limit.as_millis(),
                    got: buf.len() as u64,
                    expected: Some(body),
                },
                consumed: false,
            }),
        }
    }

    /// Takes an upstream connection and completes the request's head in `bufs.out` with its
    /// `Host`; how many bytes of the body `buf` holds (at its start), to go with the head.
    /// Starts the answer deadline.
    async fn checkout(&self, bufs: &mut Buffers) -> Result<(Conn, usize), Failure> {
        let Buffers {
            buf, out, deadline, ..
        } = bufs;
        let body = self.head.body;
        let conn = self.pool.checkout().await.map_err(|e| Failure::Answer {
            err: self.shared.upstream_error(self.upstream, e),
            consumed: body == 0,
        })?;
        h1up::head::insert_host(out, self.host_at, conn.authority(self.pool));
        // At most buf.len(), so it fits in usize.
        let held = body.min(buf.len() as u64) as usize;
        self.upstream.count_request();
        deadline.set(tokio::time::Instant::now() + self.upstream.request_timeout());
        Ok((conn, held))
    }

    /// The upstream's answer on its way to the client, its head saying `close` or not.
    fn relaying(&self, close: bool) -> Relaying<'_> {
        Relaying {
            upstream: self.upstream,
            request_id: self.request_id,
            close,
        }
    }

    /// The answer to the client when no response head came; `consumed`: the request body is
    /// all off the client connection.
    fn no_head(&self, no: NoHead, consumed: bool) -> Failure {
        match no {
            NoHead::Timeout => self.timeout(consumed),
            NoHead::Reconnect(e) => Failure::Answer {
                err: self.shared.upstream_error(self.upstream, e),
                consumed,
            },
            NoHead::Closed(why) | NoHead::Invalid(why) => self.bad_gateway(why, consumed),
        }
    }

    /// Sends the head in `bufs.out` and the body's start (all of `bufs.buf`), then streams the
    /// `streamed` bytes of body still to come from the client to the upstream while its answer
    /// is read and relayed back: an upstream may answer the first part of a body before it has
    /// the rest, and its client may wait for that answer before it sends more.
    ///
    /// An answer that comes before the whole body has gone up says `connection: close`; when it
    /// has been relayed and the body is still not all up, the rest stays unread (a 413 for a
    /// body over the upstream's limit, as nginx relays it) and both connections close.
    async fn duplex<IO>(
        &self,
        io: &mut IO,
        mut conn: Conn,
        streamed: u64,
        bufs: &mut Buffers,
        answered: &mut Option<(u16, Instant)>,
    ) -> Result<Done, Failure>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let Buffers {
            buf, out, deadline, ..
        } = &mut *bufs;
        let sent = deadline
            .run(async {
                pms_h1::write_two(&mut conn.stream, out, buf).await?;
                // TLS holds written records until flushed.
                conn.stream.flush().await
            })
            .await;
        buf.clear();
        Buffers::release(buf);
        match sent {
            Err(_) => return Err(self.timeout(false)),
            Ok(Err(e)) => return Err(self.bad_gateway(e.to_string(), false)),
            Ok(Ok(())) => {}
        }
        let body = self.head.body;
        let head_request = self.head.method == Method::HEAD;
        let (client_in, mut client_out) = tokio::io::split(&mut *io);
        let mut rest = Upload::new(client_in.take(streamed), self.shared.body_read_timeout);
        let mut uploaded = None;
        let (mut up_in, mut up_out) = tokio::io::split(&mut conn.stream);
        let ended = {
            let upload = async {
                let copied = match tokio::io::copy(&mut rest, &mut up_out).await {
                    Ok(n) if n == streamed => up_out.flush().await.map(|()| Uploaded::Whole),
                    Ok(_) => Ok(Uploaded::ClientGone),
                    Err(e) => Err(e),
                };
                match copied {
                    Ok(done) => done,
                    Err(_) if rest.stalled() => {
                        Uploaded::Stalled(body - streamed + rest.received())
                    }
                    Err(_) if rest.client_failed() => Uploaded::ClientGone,
                    // The upstream stopped reading: its answer, if one comes, decides.
                    Err(_) => Uploaded::Stopped,
                }
            };
            let mut upload = std::pin::pin!(upload);
            let got = {
                let Buffers {
                    up,
                    fields,
                    deadline,
                    ..
                } = &mut *bufs;
                let mut got =
                    std::pin::pin!(read_head(&mut up_in, up, fields, head_request, deadline));
                loop {
                    tokio::select! {
                        biased;
                        got = &mut got => break got,
                        done = &mut upload, if uploaded.is_none() => {
                            uploaded = Some(self.uploading(done)?);
                        }
                    }
                }
            };
            let whole = uploaded == Some(Uploaded::Whole);
            match got {
                Err(NoHead::Timeout) if !whole => Ended::TimedOut,
                Err(no) => return Err(self.no_head(no, whole)),
                Ok(head) => {
                    *answered = Some((head.status.as_u16(), Instant::now()));
                    let close = !self.head.keep_alive || !whole;
                    let relaying = self.relaying(close);
                    let mut relay =
                        std::pin::pin!(relaying.relay(&mut client_out, &mut up_in, &head, bufs));
                    let relayed = loop {
                        tokio::select! {
                            biased;
                            relayed = &mut relay => break relayed,
                            done = &mut upload, if uploaded.is_none() => {
                                // The answer has begun: a client that fails now is not answered.
                                uploaded = Some(self.uploading(done).map_err(|_| Failure::Abort)?);
                            }
                        }
                    };
                    Ended::Relayed {
                        status: head.status.as_u16(),
                        relayed,
                        close,
                    }
                }
            }
        };
        // The rest of the body, if any, stays unread.
        let waiting_on_client = rest.waiting_on_client();
        let got = body - streamed + rest.received();
        drop((rest, up_in, up_out, client_out));
        let whole = uploaded == Some(Uploaded::Whole);
        let (status, relayed, close) = match ended {
            Ended::TimedOut if waiting_on_client => {
                return Err(Failure::Answer {
                    err: GatewayError::SlowBody {
                        after_ms: self.upstream.request_timeout().as_millis(),
                        got,
                        expected: Some(body),
                    },
                    consumed: false,
                })
            }
            Ended::TimedOut => return Err(self.timeout(false)),
            Ended::Relayed {
                status,
                relayed,
                close,
            } => (status, relayed, close),
        };
        self.pool.answered(&conn, status);
        match relayed {
            Ok(reusable) => {
                io.flush().await.map_err(|_| Failure::Abort)?;
                if reusable && whole && bufs.up.is_empty() {
                    self.pool.checkin(conn);
                }
                Ok(match (whole, close) {
                    (false, _) => Done::BodyLeft,
                    (true, true) => Done::Close,
                    (true, false) => Done::Whole,
                })
            }
            Err(Relay::Unsent(err)) => {
                *answered = None;
                Err(Failure::Answer {
                    err,
                    consumed: whole,
                })
            }
            Err(Relay::Broken(failure)) => Err(failure),
        }
    }

    /// What an ended upload means while the answer is awaited: the body is up, or the upstream
    /// stopped reading it (its answer decides); a client that went away or stopped sending
    /// fails the exchange.
    fn uploading(&self, done: Uploaded) -> Result<Uploaded, Failure> {
        match done {
            Uploaded::Whole | Uploaded::Stopped => Ok(done),
            // Nobody to answer.
            Uploaded::ClientGone => Err(Failure::Abort),
            Uploaded::Stalled(received) => Err(Failure::Answer {
                err: GatewayError::BodyStalled(BodyStalled {
                    after: self.shared.body_read_timeout,
                    received,
                }),
                consumed: false,
            }),
        }
    }
}

/// How the streaming of a request body to the upstream ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Uploaded {
    /// All of it went up.
    Whole,
    /// The upstream stopped reading it (it may have answered already).
    Stopped,
    /// The client's connection ended or failed before the whole body.
    ClientGone,
    /// The client sent nothing for the body read timeout; how much of the body came.
    Stalled(u64),
}

/// How a full-duplex exchange ended, its upload's futures dropped.
enum Ended {
    /// No answer head came in time while the body was still going up.
    TimedOut,
    /// The answer, with its status, relayed (or not); `close`: its head said so.
    Relayed {
        status: u16,
        relayed: Result<bool, Relay>,
        close: bool,
    },
}

/// How a relayed exchange ended for the client's connection.
pub(super) enum Done {
    /// The request was read whole: the connection may carry the next one.
    Whole,
    /// The request was read whole, but the answer said the connection closes.
    Close,
    /// The answer came before the client's whole body was read: the connection is closed
    /// after it (lingering, so that the client gets the answer rather than a reset).
    BodyLeft,
}
