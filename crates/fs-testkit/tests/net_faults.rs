//! The proxy's network faults do what they say: a cut after the server carried the request out
//! leaves the write in place with no answer, a cut before leaves nothing, 429 and 503 carry
//! nothing out, bulk items rejected alone are not written while the others are, a refused
//! connection never reaches a handler, and a killed proxy refuses connections.

use fs_testkit::{start_es_proxy, EsProxy, EsProxyOptions, NetFaults};
use serde_json::{json, Value};

fn with(faults: NetFaults) -> EsProxy {
    start_es_proxy(EsProxyOptions {
        faults,
        ..EsProxyOptions::default()
    })
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("HTTP client")
}

/// Sends `PUT /index/_doc/id`; returns the status and the body, or the transport error.
async fn put(url: &str, index: &str, id: &str) -> Result<(u16, String), reqwest::Error> {
    let response = client()
        .put(format!("{url}/{index}/_doc/{id}"))
        .json(&json!({"path": format!("/{id}")}))
        .send()
        .await?;
    let status = response.status().as_u16();
    Ok((status, response.text().await?))
}

/// Whether the document exists, asked of the server behind (no fault on the way).
async fn exists(index: &str, id: &str) -> bool {
    let response = client()
        .get(format!("{}/{index}/_doc/{id}", fs_testkit::osmem_url()))
        .send()
        .await
        .expect("GET from osmem");
    let body: Value = response.json().await.expect("JSON");
    body["found"] == json!(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_after_carries_the_write_out_and_loses_the_answer() {
    let proxy = with(NetFaults {
        cut_after: 1.0,
        ..NetFaults::none(1)
    });
    let index = fs_testkit::unique_name("cut-after");
    let sent = put(proxy.url(), &index, "a").await;
    assert!(sent.is_err(), "the answer must be lost, got {sent:?}");
    assert!(exists(&index, "a").await, "the write must have landed");
    assert_eq!(proxy.stats().cut_after, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_before_and_refusals_and_rejections_carry_nothing_out() {
    let index = fs_testkit::unique_name("not-carried");
    let proxy = with(NetFaults {
        cut_before: 1.0,
        ..NetFaults::none(2)
    });
    assert!(put(proxy.url(), &index, "a").await.is_err());
    assert_eq!(proxy.stats().cut_before, 1);

    proxy.set_faults(NetFaults {
        too_many: 1.0,
        ..NetFaults::none(2)
    });
    let (status, body) = put(proxy.url(), &index, "b").await.expect("an answer");
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("es_rejected_execution_exception"), "{body}");

    proxy.set_faults(NetFaults {
        unavailable: 1.0,
        ..NetFaults::none(2)
    });
    let (status, _) = put(proxy.url(), &index, "c").await.expect("an answer");
    assert_eq!(status, 503);

    proxy.set_faults(NetFaults {
        refuse: 1.0,
        ..NetFaults::none(2)
    });
    // A new client, so that a new connection is opened (and refused).
    assert!(put(proxy.url(), &index, "d").await.is_err());
    assert!(proxy.stats().refused >= 1);

    for id in ["a", "b", "c", "d"] {
        assert!(
            !exists(&index, id).await,
            "`{id}` must not have been written"
        );
    }
    proxy.set_faults(NetFaults::none(2));
    assert_eq!(put(proxy.url(), &index, "e").await.expect("calm").0, 201);
    assert!(exists(&index, "e").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_items_rejected_alone_are_not_written_and_the_others_are() {
    let proxy = with(NetFaults {
        bulk_items_too_many: 0.3,
        ..NetFaults::none(3)
    });
    let index = fs_testkit::unique_name("items");
    let mut body = String::new();
    for n in 0..200 {
        body.push_str(&format!(
            "{{\"index\":{{\"_id\":\"d{n}\"}}}}\n{{\"n\":{n}}}\n"
        ));
    }
    let answer: Value = client()
        .post(format!("{}/{index}/_bulk", proxy.url()))
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .expect("bulk")
        .json()
        .await
        .expect("JSON");
    assert_eq!(answer["errors"], json!(true));
    let items = answer["items"].as_array().expect("items");
    assert_eq!(items.len(), 200);
    let mut rejected = 0;
    for (n, item) in items.iter().enumerate() {
        let result = &item["index"];
        assert_eq!(
            result["_id"],
            json!(format!("d{n}")),
            "answers stay in order"
        );
        let written = exists(&index, &format!("d{n}")).await;
        match result["status"].as_u64() {
            Some(429) => {
                rejected += 1;
                assert_eq!(
                    result["error"]["type"],
                    json!("es_rejected_execution_exception")
                );
                assert!(!written, "d{n} was rejected but written");
            }
            Some(201) => assert!(written, "d{n} was answered 201 but not written"),
            other => panic!("d{n}: unexpected status {other:?}: {item}"),
        }
    }
    assert!(
        (30..90).contains(&rejected),
        "{rejected} of 200 rejected at 30 %"
    );
    assert_eq!(proxy.stats().items_too_many, rejected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_proxy_refuses_connections() {
    let mut proxy = with(NetFaults::none(4));
    let index = fs_testkit::unique_name("killed");
    assert_eq!(put(proxy.url(), &index, "a").await.expect("alive").0, 201);
    proxy.kill();
    let error = put(proxy.url(), &index, "b").await.expect_err("dead");
    assert!(error.is_connect(), "a refused connection, got {error:?}");
}
