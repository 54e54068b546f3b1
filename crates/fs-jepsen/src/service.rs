//! Calls through `fsrename serve`: the instances (started, killed, started again under a new
//! name, as a crashed instance is replaced), and one call as a job over HTTP.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cli_client::Fsrename;
use crate::history::{Op, Outcome};

/// The last lines of an instance's log kept, for a failed history's report.
const LOG_LINES: usize = 20_000;

/// One `fsrename serve` process.
#[derive(Debug)]
struct Instance {
    name: String,
    base: String,
    child: tokio::process::Child,
}

/// The service instances of a history: slot `i` holds instance `svc-i` (or its replacement).
#[derive(Debug)]
pub struct Services {
    fsrename: Fsrename,
    slots: Vec<tokio::sync::Mutex<Option<Instance>>>,
    bases: Mutex<Vec<Option<String>>>,
    log: Arc<Mutex<VecDeque<String>>>,
    generation: Mutex<usize>,
    http: reqwest::Client,
}

impl Services {
    /// Starts `count` instances.
    ///
    /// # Errors
    /// An instance that does not start, with its log.
    pub async fn start(fsrename: &Fsrename, count: usize) -> Result<Services, String> {
        let services = Services {
            fsrename: fsrename.clone(),
            slots: (0..count).map(|_| tokio::sync::Mutex::new(None)).collect(),
            bases: Mutex::new(vec![None; count]),
            log: Arc::default(),
            generation: Mutex::new(0),
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| format!("an HTTP client: {e}"))?,
        };
        for slot in 0..count {
            services.restart(slot).await?;
        }
        Ok(services)
    }

    /// How many slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The instances up at this moment: name and process id. A slot being started again or
    /// killed is passed over rather than waited for.
    pub fn instances(&self) -> Vec<(String, u32)> {
        self.slots
            .iter()
            .filter_map(|slot| {
                let guard = slot.try_lock().ok()?;
                let instance = guard.as_ref()?;
                Some((instance.name.clone(), instance.child.id()?))
            })
            .collect()
    }

    /// The last lines the instances logged.
    pub fn log(&self) -> String {
        self.log
            .lock()
            .map(|l| l.iter().cloned().collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }

    /// Starts slot `slot`'s instance (a new one, under a new name, if one ran there).
    ///
    /// # Errors
    /// If it does not start within a minute.
    pub async fn restart(&self, slot: usize) -> Result<(), String> {
        let mut guard = self.slots[slot].lock().await;
        if let Some(mut old) = guard.take() {
            let _ = old.child.start_kill();
            let _ = old.child.wait().await;
        }
        let generation = {
            let mut g = self.generation.lock().map_err(|e| e.to_string())?;
            *g += 1;
            *g
        };
        let name = format!("svc-{slot}-{generation}");
        let mut child = self
            .fsrename
            .command()
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--instance",
                &name,
                "--max-jobs",
                "4",
                "--wait",
                &format!("{}ms", self.fsrename.wait.as_millis()),
                "--recover-every",
                "2s",
                "--grace",
                "5s",
            ])
            .args(&self.fsrename.serve)
            .env("FSRENAME_LOG", "fsrename=info,fs_rename=warn,fs_locks=warn")
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("start {name}: {e}"))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| format!("{name}: no stderr"))?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let log = Arc::clone(&self.log);
        let tag = name.clone();
        // Drains the instance's log to its end, so that it never blocks on it.
        tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split("serving on ").nth(1) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_owned());
                    }
                }
                if let Ok(mut log) = log.lock() {
                    if log.len() >= LOG_LINES {
                        log.pop_front();
                    }
                    log.push_back(format!("{tag}: {line}"));
                }
            }
        });
        let base = tokio::time::timeout(Duration::from_secs(60), rx)
            .await
            .map_err(|_| format!("{name} did not start within a minute:\n{}", self.log()))?
            .map_err(|_| format!("{name} ended before serving:\n{}", self.log()))?;
        if let Ok(mut bases) = self.bases.lock() {
            bases[slot] = Some(base.clone());
        }
        *guard = Some(Instance { name, base, child });
        Ok(())
    }

    /// Kills slot `slot`'s instance (SIGKILL); its name, or None if none ran.
    pub async fn kill(&self, slot: usize) -> Option<String> {
        let mut guard = self.slots[slot].lock().await;
        let mut instance = guard.take()?;
        if let Ok(mut bases) = self.bases.lock() {
            bases[slot] = None;
        }
        let _ = instance.child.start_kill();
        let _ = instance.child.wait().await;
        tracing_note(
            &self.log,
            &format!("{} (at {}) killed", instance.name, instance.base),
        );
        Some(instance.name)
    }

    /// Stops every instance: SIGTERM, so that each closes what it holds open (a search
    /// context of a killed instance stays on the server until its keep-alive ends and the
    /// server's reaper runs), and SIGKILL after 10 s.
    pub async fn stop(&self) {
        for slot in &self.slots {
            let mut guard = slot.lock().await;
            let Some(mut instance) = guard.take() else {
                continue;
            };
            if let Some(pid) = instance.child.id() {
                crate::processes::signal(pid, crate::processes::Sig::Term);
            }
            if tokio::time::timeout(Duration::from_secs(10), instance.child.wait())
                .await
                .is_err()
            {
                let _ = instance.child.start_kill();
                let _ = instance.child.wait().await;
            }
        }
        if let Ok(mut bases) = self.bases.lock() {
            bases.iter_mut().for_each(|b| *b = None);
        }
    }

    fn bases(&self, first: usize) -> Vec<String> {
        let bases = self.bases.lock().map(|b| b.clone()).unwrap_or_default();
        let n = bases.len();
        (0..n)
            .filter_map(|i| bases[(first + i) % n].clone())
            .collect()
    }

    /// Makes `op` (a rename, copy or delete) a job of the instance in slot `slot` (or of the
    /// next one up if it is down), and follows it on any instance until it ends or `deadline`
    /// passes.
    pub async fn call(&self, slot: usize, op: &Op, deadline: Duration) -> Outcome {
        let until = Instant::now() + deadline;
        let (route, body) = match op {
            Op::Mv { from, to } => ("renames", json!({ "from": from, "to": to })),
            Op::Cp { from, to } => ("copies", json!({ "from": from, "to": to })),
            Op::Rm { path } => ("deletes", json!({ "path": path, "recursive": true })),
            Op::Mkdir { .. } | Op::Touch { .. } => {
                return Outcome::Failed {
                    error: "the service makes no directories or files".into(),
                }
            }
        };
        // Submit: an instance that refuses the connection got nothing, so the next is tried;
        // any other failure after sending may have been accepted, so the outcome is unknown.
        let mut id = None;
        'submit: while Instant::now() < until {
            let bases = self.bases(slot);
            for base in &bases {
                match self
                    .http
                    .post(format!("{base}/{route}"))
                    .json(&body)
                    .send()
                    .await
                {
                    Ok(answer) => {
                        let status = answer.status().as_u16();
                        let answer: Value = answer.json().await.unwrap_or(Value::Null);
                        if status == 202 {
                            match answer["id"].as_str() {
                                Some(job) => {
                                    id = Some((job.to_owned(), base.clone()));
                                    break 'submit;
                                }
                                None => {
                                    return Outcome::Unknown {
                                        why: format!("202 without a job id: {answer}"),
                                    }
                                }
                            }
                        }
                        return Outcome::Failed {
                            error: format!("{status} from {base}: {answer}"),
                        };
                    }
                    Err(e) if e.is_connect() => continue,
                    Err(e) => {
                        return Outcome::Unknown {
                            why: format!("POST {base}/{route}: {e}"),
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let Some((id, _)) = id else {
            return Outcome::Failed {
                error: "no instance took the job (all refused connections)".into(),
            };
        };
        // Follow it on whichever instance answers: any instance shows any job.
        let mut last = Value::Null;
        while Instant::now() < until {
            for base in self.bases(slot) {
                let Ok(answer) = self.http.get(format!("{base}/jobs/{id}")).send().await else {
                    continue;
                };
                if answer.status().as_u16() != 200 {
                    continue;
                }
                let Ok(job) = answer.json::<Value>().await else {
                    continue;
                };
                match job["state"].as_str() {
                    Some("done") => return Outcome::Ok,
                    Some("failed") => {
                        return Outcome::Failed {
                            error: job["error"].as_str().unwrap_or("failed").to_owned(),
                        }
                    }
                    _ => last = job,
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Outcome::Unknown {
            why: format!(
                "job {id} had not ended within {deadline:?}: {}",
                last["state"]
            ),
        }
    }
}

fn tracing_note(log: &Mutex<VecDeque<String>>, line: &str) {
    if let Ok(mut log) = log.lock() {
        log.push_back(format!("nemesis: {line}"));
    }
}
