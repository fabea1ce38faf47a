//! Clients that are slow on purpose: a head sent a byte a second is cut off at the header
//! timeout, a body that does not arrive gets 408, connections beyond the cap wait, and none of
//! them holds up shutdown.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::util::Workspace;

/// A client sending a request head one byte a second, as a slowloris attack does.
struct SlowClient {
    stream: TcpStream,
}

impl SlowClient {
    fn connect(addr: &str) -> SlowClient {
        let mut stream = TcpStream::connect(addr).unwrap();
        write!(stream, "GET /health HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ").unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        SlowClient { stream }
    }

    /// Sends a byte a second until the host closes the connection; returns how long it took,
    /// or `None` if it was still open after `within`.
    fn closed_within(&mut self, within: Duration) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < within {
            if self.stream.write_all(b"a").is_err() {
                return Some(started.elapsed());
            }
            let mut buf = [0u8; 256];
            match self.stream.read(&mut buf) {
                Ok(0) => return Some(started.elapsed()),
                // Anything the host says to a head that never ends is the end of it too.
                Ok(_) => return Some(started.elapsed()),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return Some(started.elapsed()),
            }
        }
        None
    }
}

#[test]
fn a_head_sent_a_byte_a_second_is_cut_off_at_the_header_timeout() {
    let ws = Workspace::with_plugins(&[]);
    let host = ws.start(&["--header-timeout", "2s"]);
    let mut slow = SlowClient::connect(&host.addr());
    let closed = slow
        .closed_within(Duration::from_secs(20))
        .expect("the host closes a connection whose head never ends");
    assert!(
        closed >= Duration::from_millis(1500) && closed < Duration::from_secs(8),
        "closed after {closed:?}, header timeout 2s"
    );

    // A connection that sends nothing at all, or nothing after its last answer, goes the same way.
    let mut idle = TcpStream::connect(host.addr()).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let started = Instant::now();
    assert_eq!(idle.read(&mut [0u8; 16]).unwrap_or(0), 0);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "an idle connection lasted {:?}",
        started.elapsed()
    );

    let (status, _) = host.get("/health");
    assert_eq!(status, 200, "the host serves others all along");
}

#[test]
fn a_slow_client_does_not_hold_up_shutdown() {
    let ws = Workspace::with_plugins(&[]);
    // A header timeout far beyond the test: only shutdown can end the slow connection.
    let mut host = ws.start(&["--header-timeout", "10m"]);
    let addr = host.addr();
    let slow = std::thread::spawn(move || {
        SlowClient::connect(&addr).closed_within(Duration::from_secs(60))
    });
    // An idle keep-alive connection, left open by a client's pool.
    let (status, _) = host.get("/health");
    assert_eq!(status, 200);
    std::thread::sleep(Duration::from_secs(2));

    host.signal("TERM");
    let started = Instant::now();
    assert!(
        host.wait_exit(Duration::from_secs(30)),
        "clean exit:\n{}",
        host.log()
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown took {:?} with a slow client connected",
        started.elapsed()
    );
    assert!(
        slow.join().unwrap().is_some(),
        "the slow client's connection was closed"
    );
}

#[test]
fn a_body_that_does_not_arrive_gets_408() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&["--body-timeout", "1s"]);
    let mut stream = TcpStream::connect(host.addr()).unwrap();
    write!(
        stream,
        "POST /tasks HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"task_type\"",
        host.addr()
    )
    .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "{answer:?} after {:?}",
        started.elapsed()
    );
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "answered after {:?}",
        started.elapsed()
    );
    assert!(host.all_tasks().is_empty());
}

#[test]
fn connections_beyond_the_cap_wait_for_a_free_slot() {
    let ws = Workspace::with_plugins(&[]);
    let host = ws.start(&["--max-connections", "2", "--header-timeout", "3s"]);
    let held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(host.addr()).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let impatient = reqwest::blocking::Client::builder()
        .timeout(Duration::from_millis(1000))
        .build()
        .unwrap();
    let refused = impatient.get(format!("{}/health", host.url)).send();
    assert!(
        refused.is_err(),
        "a third connection waits while two are held: {refused:?}"
    );
    // The held connections send nothing; the header timeout frees their slots.
    let patient = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let started = Instant::now();
    let response = patient.get(format!("{}/health", host.url)).send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "served after {:?}",
        started.elapsed()
    );
    assert!(
        host.log().contains("connection limit"),
        "the limit is logged:\n{}",
        host.log()
    );
    drop(held);
}
