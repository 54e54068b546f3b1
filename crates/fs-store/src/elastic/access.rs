//! A server that will not let fsrename in, said in words: certificates that cannot be trusted,
//! TLS spoken to a plain port or plain HTTP to a TLS one, credentials refused (401) and
//! privileges missing (403).
//!
//! None of these gets better by waiting, so each fails the call at once, where a refused
//! connection is retried: a command run by hand says what is wrong within a second, not after
//! the retry deadline. No message carries a password or a key: credentials are named by user
//! or by the API key's id.

use serde_json::Value;

use super::config::ElasticConfig;

/// What failed, if `error` is a TLS failure that no retry can mend: a certificate the client
/// cannot trust, or a server that does not speak TLS on that port.
pub(super) fn tls_failure(
    error: &elasticsearch::Error,
    node: &str,
    config: &ElasticConfig,
) -> Option<String> {
    let tls = rustls_error(error)?;
    let host = host_of(node);
    let message = match tls {
        rustls::Error::InvalidCertificate(cert) => certificate(cert, node, &host, config),
        rustls::Error::InvalidMessage(_) => format!(
            "{node} does not answer in TLS (a plain HTTP port?): use http:// for it, or the port where it serves HTTPS"
        ),
        rustls::Error::AlertReceived(alert) => format!(
            "{node} ended the TLS handshake ({alert:?}); it may want a client certificate, or a TLS version or cipher this client lacks"
        ),
        other => format!("TLS with {node} failed: {other}"),
    };
    Some(message)
}

/// Says why the server's certificate is not trusted.
fn certificate(
    error: &rustls::CertificateError,
    node: &str,
    host: &str,
    config: &ElasticConfig,
) -> String {
    use rustls::CertificateError as C;
    let trusted = match (&config.ca_cert, &config.ca_fingerprint) {
        (Some(path), _) => format!("the CA in `{}`", path.display()),
        (None, Some(fingerprint)) => format!("the CA whose SHA-256 is {fingerprint}"),
        (None, None) => "any CA this machine trusts".to_owned(),
    };
    match error {
        C::UnknownIssuer | C::BadSignature => {
            let hint = if config.ca_cert.is_none() && config.ca_fingerprint.is_none() {
                " (give the CA that signed it with --ca-cert FILE or FSRENAME_ES_CA, or its SHA-256 with --ca-fingerprint)"
            } else {
                " (is it the CA of this server?)"
            };
            format!("the certificate of {node} is not signed by {trusted}{hint}")
        }
        C::NotValidForNameContext { presented, .. } => format!(
            "the certificate of {node} is not for `{host}`: it names {} (connect by one of those names, or have the certificate name `{host}`)",
            if presented.is_empty() {
                "no host".to_owned()
            } else {
                presented.iter().map(|name| unwrap_name(name)).collect::<Vec<_>>().join(", ")
            }
        ),
        C::NotValidForName => format!("the certificate of {node} is not for `{host}`"),
        C::ExpiredContext { not_after, .. } => format!(
            "the certificate of {node} expired on {} (renew it on the server)",
            date(not_after.as_secs())
        ),
        C::Expired => format!("the certificate of {node} has expired (renew it on the server)"),
        C::NotValidYetContext { not_before, .. } => format!(
            "the certificate of {node} is not valid before {} (is this machine's clock right?)",
            date(not_before.as_secs())
        ),
        C::NotValidYet => format!("the certificate of {node} is not valid yet"),
        other => format!("the certificate of {node} is refused: {other:?}"),
    }
}

/// A presented name as the TLS library writes it (`DnsName("es.example")`,
/// `IpAddress(10.0.0.1)`), without its wrapper.
fn unwrap_name(name: &str) -> &str {
    match name.split_once('(') {
        Some((_, inner)) => inner.trim_end_matches(')').trim_matches('"'),
        None => name,
    }
}

fn date(secs: u64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    humantime::format_rfc3339_seconds(time).to_string()
}

/// The host of a node URL, without scheme, port or path.
fn host_of(node: &str) -> String {
    let rest = node.split_once("://").map_or(node, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6).to_owned(),
        None => authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host)
            .to_owned(),
    }
}

/// What is wrong, if plain HTTP went to `node` (`http://…`) and it answered in a way no
/// Elasticsearch answers plain HTTP (a 400 without a JSON body, as a TLS front does, or a
/// connection closed without an answer, as Elasticsearch's TLS port does), and the port
/// speaks TLS: one handshake tells.
pub(super) async fn plain_to_tls(node: &str) -> Option<String> {
    let url = elasticsearch::http::Url::parse(node).ok()?;
    if url.scheme() != "http" {
        return None;
    }
    let host = url
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = url.port_or_known_default()?;
    let tls = tokio::task::spawn_blocking(move || {
        super::fingerprint::presented_chain(&host, port).is_ok()
    })
    .await
    .unwrap_or(false);
    tls.then(|| {
        let https = format!("https://{}", node.trim_start_matches("http://"));
        format!("{node} speaks TLS on that port: use {https}")
    })
}

/// The TLS library's error inside `error`, if there is one.
fn rustls_error(error: &elasticsearch::Error) -> Option<&rustls::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        // An `io::Error` hides the error it wraps from `source()` (it returns that error's
        // own source), and the TLS error comes wrapped twice: look inside each.
        let mut io = e.downcast_ref::<std::io::Error>();
        while let Some(inner) = io.and_then(|io| io.get_ref()) {
            if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
                return Some(tls);
            }
            io = inner.downcast_ref::<std::io::Error>();
        }
        source = e.source();
    }
    None
}

/// What is wrong, if an answer with `status` and `body` (if it is JSON) refuses access: 401
/// (credentials missing or refused) or 403 (a privilege missing).
pub(super) fn refusal(
    status: u16,
    body: Option<&Value>,
    node: &str,
    config: &ElasticConfig,
) -> Option<String> {
    let reason = body.map(reason_of).unwrap_or_default();
    match status {
        401 => {
            let given = match &config.auth {
                Some(auth) => format!("refused {}", auth.describe()),
                None => "asks for credentials and none were given (--user with --password-file, or --api-key-file; or FSRENAME_ES_USER with FSRENAME_ES_PASSWORD, or FSRENAME_ES_API_KEY)".to_owned(),
            };
            Some(format!("{node} {given} ({})", status_and(401, &reason)))
        }
        403 => {
            let user = bracketed(&reason, "for user [");
            let action = bracketed(&reason, "action [");
            let indices = bracketed(&reason, "on indices [");
            let who = user.map_or_else(
                || match &config.auth {
                    Some(auth) => auth.describe(),
                    None => "this client".to_owned(),
                },
                |user| format!("user `{user}`"),
            );
            let what = match (action, indices) {
                (Some(action), Some(indices)) => {
                    format!(
                        "may not `{action}` on index `{indices}` (give its role that privilege)"
                    )
                }
                (Some(action), None) => format!("may not `{action}`"),
                _ => "is not allowed this".to_owned(),
            };
            Some(format!("{who} {what} ({})", status_and(403, &reason)))
        }
        _ => None,
    }
}

/// `HTTP 401` with the server's reason, where it gave one (a `HEAD` answer has no body).
fn status_and(status: u16, reason: &str) -> String {
    if reason.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {reason}")
    }
}

/// The server's reason in an Elasticsearch error body.
fn reason_of(body: &Value) -> String {
    let error = &body["error"];
    error["reason"]
        .as_str()
        .or(error["root_cause"][0]["reason"].as_str())
        .or(error.as_str())
        .unwrap_or("")
        .to_owned()
}

/// The text between `after` and the next `]` in `reason`: Elasticsearch's security messages
/// name the action, user and indices that way ("action [indices:data/read/search] is
/// unauthorized for user [reader] … on indices [fs]").
fn bracketed<'a>(reason: &'a str, after: &str) -> Option<&'a str> {
    let start = reason.find(after)? + after.len();
    let rest = &reason[start..];
    // An action may itself hold brackets (`indices:data/write/bulk[s]`): the value ends at
    // the first `]` followed by a space, a comma or nothing.
    let end = ["] ", "],"]
        .iter()
        .filter_map(|end| rest.find(end))
        .min()
        .or_else(|| rest.rfind(']'))?;
    Some(&rest[..end]).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elastic::config::Auth;
    use serde_json::json;

    #[test]
    fn a_missing_privilege_names_the_user_action_and_index() {
        let reason = "action [indices:data/write/bulk[s]] is unauthorized for user [reader] with roles [viewer] on indices [fs-lock], this action is granted by the index privileges [create_doc,create,delete,index,write,all]";
        let body =
            json!({"error": {"type": "security_exception", "reason": reason}, "status": 403});
        let config = ElasticConfig::new("https://127.0.0.1:9200").expect("url");
        let message = refusal(403, Some(&body), "https://127.0.0.1:9200", &config).expect("403");
        assert!(
            message.starts_with(
                "user `reader` may not `indices:data/write/bulk[s]` on index `fs-lock`"
            ),
            "{message}"
        );
    }

    #[test]
    fn a_refused_key_is_named_by_its_id_only() {
        let config = ElasticConfig::new("https://h:1")
            .expect("url")
            .auth(Auth::api_key("VuaCfGcBCdbkQm-e5aOx:ui2lp2axTNmsyakw9tvNnw"));
        let body = json!({"error": {"reason": "unable to authenticate with provided credentials"}});
        let message = refusal(401, Some(&body), "https://h:1", &config).expect("401");
        assert!(message.contains("id `VuaCfGcBCdbkQm-e5aOx`"), "{message}");
        assert!(!message.contains("ui2lp2"), "{message}");
    }

    #[test]
    fn presented_names_lose_their_wrapper() {
        assert_eq!(unwrap_name("DnsName(\"es.example\")"), "es.example");
        assert_eq!(unwrap_name("IpAddress(10.0.0.1)"), "10.0.0.1");
        assert_eq!(unwrap_name("es.example"), "es.example");
    }

    #[test]
    fn hosts_are_read_from_node_urls() {
        assert_eq!(host_of("https://127.0.0.1:9200"), "127.0.0.1");
        assert_eq!(host_of("https://es.example:9200/base"), "es.example");
        assert_eq!(host_of("https://[::1]:9200"), "::1");
        assert_eq!(host_of("https://es"), "es");
    }
}
