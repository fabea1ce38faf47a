//! A host on loopback answers only to its own names (a page that rebinds its DNS name to
//! 127.0.0.1 gets nothing), and a browser page from another origin cannot change tasks with a
//! form POST; requests from curl or the CLI, which send no `Origin`, pass.

use serde_json::json;

use crate::util::Workspace;

#[test]
fn a_loopback_host_refuses_foreign_host_names() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&["--allowed-hosts", "spool.test,proxy.test:8443"]);
    let port = host.addr().rsplit_once(':').unwrap().1.to_string();
    let get =
        |host_header: &str| host.raw(&format!("GET /tasks HTTP/1.1\r\nHost: {host_header}"), "");

    for rebound in [
        format!("evil.example:{port}"),
        format!("localhost.evil.example:{port}"),
        "evil.example".into(),
    ] {
        let (status, body) = get(&rebound);
        assert_eq!(status, 403, "Host: {rebound}: {body}");
        assert_eq!(body["error"]["code"], "forbidden_host");
    }
    let (status, body) = get("localhost:1");
    assert_eq!(status, 403, "another port is another server: {body}");
    for own in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "spool.test".into(),
        "proxy.test:8443".into(),
    ] {
        let (status, body) = get(&own);
        assert_eq!(status, 200, "Host: {own}: {body}");
    }
    let (status, _) = get("proxy.test:9000");
    assert_eq!(
        status, 403,
        "an allowed name with a port allows that port only"
    );
    let (status, body) = host.raw(
        &format!("GET http://evil.example:{port}/tasks HTTP/1.1\r\nHost: localhost:{port}"),
        "",
    );
    assert_eq!(
        status, 403,
        "an absolute-form target names the host too: {body}"
    );
    // The health check is refused as well: it names the task types and counts.
    let (status, _) = host.raw("GET /health HTTP/1.1\r\nHost: evil.example", "");
    assert_eq!(status, 403);
}

#[test]
fn cross_site_form_posts_cannot_retry_or_cancel() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let port = host.addr().rsplit_once(':').unwrap().1.to_string();
    let task = host.enqueue_with(json!({"task_type": "noop", "delay": "1h"}));
    let id = task["id"].as_i64().unwrap();
    let form_post = |action: &str, origin: Option<&str>| {
        let origin = origin
            .map(|o| format!("\r\nOrigin: {o}"))
            .unwrap_or_default();
        host.raw(
            &format!(
                "POST /tasks/{id}/{action} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 3{origin}"
            ),
            "x=1",
        )
    };

    let other_port = format!("http://localhost:{}", port.parse::<u16>().unwrap() + 1);
    for origin in [
        "http://evil.example",
        "https://evil.example",
        "null",
        other_port.as_str(),
    ] {
        let (status, body) = form_post("cancel", Some(origin));
        assert_eq!(status, 403, "Origin: {origin}: {body}");
        assert_eq!(body["error"]["code"], "forbidden_origin");
    }
    let (status, body) = host.raw(
        &format!("POST /tasks/{id}/retry HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nSec-Fetch-Site: cross-site\r\nContent-Length: 0"),
        "",
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden_origin")),
        "{body}"
    );
    assert_eq!(
        host.task(id)["status"],
        "pending",
        "no cross-site request changed the task"
    );

    // The API's own origin, and clients that send no Origin at all, may change tasks.
    let (status, body) = form_post("cancel", Some(&format!("http://127.0.0.1:{port}")));
    assert_eq!(status, 200, "{body}");
    let (status, body) = form_post("retry", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "pending", "{body}");
}
