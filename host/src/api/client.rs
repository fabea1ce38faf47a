//! A small client for a running host's API, used by the CLI's client commands: each method
//! returns the view type its route serializes.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::alerts::AlertsView;
use super::control::{BulkResponse, PauseView, TypesView};
use super::deploy::{DeployedView, DeploymentView, VersionsView};
use super::health::Health;
use super::plugins::PluginsView;
use super::schedules::SchedulesView;
use super::tasks::{EnqueueResponse, TaskDetail, TaskPage, TaskView};
use crate::alerts::DrillReport;

/// Errors talking to a host.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "cannot reach the Spool host at {url}: {source}; is `spool serve` running there? (set --url or SPOOL_URL)"
    )]
    Unreachable { url: String, source: reqwest::Error },
    #[error("{code} ({status}): {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    #[error("unexpected answer from {url}: {detail}")]
    Protocol { url: String, detail: String },
}

/// What `POST /alerts/drill` answered: the drill's report, and when a channel failed, the
/// host's error message beside it.
#[derive(Debug)]
pub struct DrillAnswer {
    pub report: DrillReport,
    pub failure: Option<String>,
}

/// A connection to one host.
pub struct Client {
    base: String,
    /// Sent with changes, and with reads when there is no read token.
    token: Option<String>,
    /// Sent with reads.
    read_token: Option<String>,
    /// Sent with deploys, promotions and rollbacks, instead of the API token.
    deploy_token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// A client for the host at `base` (e.g. `http://127.0.0.1:8787`) that sends `token` (the
    /// API token) with changes and `read_token`, else `token`, with reads.
    pub fn new(base: &str, token: Option<String>, read_token: Option<String>) -> Self {
        Client {
            base: base.trim_end_matches('/').to_string(),
            token,
            read_token,
            deploy_token: None,
            http: reqwest::Client::new(),
        }
    }

    /// This client, sending `deploy_token` (when there is one) with deploys, promotions and
    /// rollbacks instead of the API token.
    pub fn with_deploy_token(mut self, deploy_token: Option<String>) -> Self {
        self.deploy_token = deploy_token;
        self
    }

    /// `POST /plugins/{type}/deploy`: a build (and its manifest) as the type's stable version,
    /// or with `canary` as a candidate for that share of the attempts.
    pub async fn deploy(
        &self,
        task_type: &str,
        component: Vec<u8>,
        manifest: Option<String>,
        canary: Option<u8>,
    ) -> Result<DeployedView, ClientError> {
        // A host answers a deploy it refuses (no right, a bad name) before reading the form,
        // and a large build still being sent then ends in a broken connection instead of the
        // answer. So the rights are asked first with an empty form, which a host that would
        // take the deploy answers 422 (no component).
        let url = self.url(&format!("/plugins/{task_type}/deploy"));
        let empty = reqwest::multipart::Form::new().text("manifest", String::new());
        match self
            .deploy_change::<Value>(self.http.post(&url).multipart(empty))
            .await
        {
            Err(ClientError::Api { status: 422, .. }) => {}
            Err(refused) => return Err(refused),
            Ok(_) => {
                return Err(ClientError::Protocol {
                    url: self.base.clone(),
                    detail: "the host took a deploy without a component".into(),
                });
            }
        }
        let mut form = reqwest::multipart::Form::new().part(
            "component",
            reqwest::multipart::Part::bytes(component)
                .file_name(format!("{task_type}.wasm"))
                .mime_str("application/wasm")
                .expect("a valid MIME type"),
        );
        if let Some(manifest) = manifest {
            form = form.text("manifest", manifest);
        }
        if let Some(canary) = canary {
            form = form.text("canary", canary.to_string());
        }
        let url = self.url(&format!("/plugins/{task_type}/deploy"));
        self.deploy_change(self.http.post(url).multipart(form))
            .await
    }

    /// `POST /plugins/{type}/promote`.
    pub async fn promote(&self, task_type: &str) -> Result<DeploymentView, ClientError> {
        let url = self.url(&format!("/plugins/{task_type}/promote"));
        self.deploy_change(self.http.post(url)).await
    }

    /// `POST /plugins/{type}/rollback`, to version `to` or, without it, off the candidate (or
    /// one version back).
    pub async fn rollback(
        &self,
        task_type: &str,
        to: Option<u64>,
        reason: Option<&str>,
    ) -> Result<DeploymentView, ClientError> {
        let mut query = Vec::new();
        if let Some(to) = to {
            query.push(("to", to.to_string()));
        }
        if let Some(reason) = reason {
            query.push(("reason", reason.to_string()));
        }
        let url = self.url(&format!("/plugins/{task_type}/rollback"));
        self.deploy_change(self.http.post(url).query(&query)).await
    }

    /// `DELETE /plugins/{type}/deployment`.
    pub async fn remove_deployment(&self, task_type: &str) -> Result<DeploymentView, ClientError> {
        let url = self.url(&format!("/plugins/{task_type}/deployment"));
        self.deploy_change(self.http.delete(url)).await
    }

    /// `GET /plugins/{type}/versions`.
    pub async fn versions(&self, task_type: &str) -> Result<VersionsView, ClientError> {
        let url = self.url(&format!("/plugins/{task_type}/versions"));
        self.read(self.http.get(url)).await
    }

    /// `GET /tasks/{id}/records`.
    pub async fn records(&self, id: i64) -> Result<crate::api::records::RecordsView, ClientError> {
        self.read(self.http.get(self.url(&format!("/tasks/{id}/records"))))
            .await
    }

    /// `GET /tasks/{id}/records/{attempt}`.
    pub async fn record(
        &self,
        id: i64,
        attempt: u32,
    ) -> Result<crate::sandbox::tape::Recording, ClientError> {
        self.read(
            self.http
                .get(self.url(&format!("/tasks/{id}/records/{attempt}"))),
        )
        .await
    }

    /// `GET /builds/{digest}`: the build's bytes.
    pub async fn build(&self, digest: &str) -> Result<Vec<u8>, ClientError> {
        let mut request = self.http.get(self.url(&format!("/builds/{digest}")));
        if let Some(token) = self.read_token.as_ref().or(self.token.as_ref()) {
            request = request.bearer_auth(token);
        }
        let unreachable = |source| ClientError::Unreachable {
            url: self.base.clone(),
            source,
        };
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        if status.is_success() {
            return Ok(response.bytes().await.map_err(unreachable)?.to_vec());
        }
        let body: Value = response.json().await.unwrap_or_default();
        let field = |name: &str| body["error"][name].as_str().unwrap_or_default().to_string();
        Err(ClientError::Api {
            status: status.as_u16(),
            code: field("code"),
            message: field("message"),
        })
    }

    /// `POST /tasks`.
    pub async fn enqueue(&self, request: &Value) -> Result<EnqueueResponse, ClientError> {
        self.change(self.http.post(self.url("/tasks")).json(request))
            .await
    }

    /// `GET /tasks/{id}`.
    pub async fn task(&self, id: i64) -> Result<TaskDetail, ClientError> {
        self.read(self.http.get(self.url(&format!("/tasks/{id}"))))
            .await
    }

    /// `GET /tasks/{id}?wait=WAIT`: answers once the task is final, or after `wait` (e.g. `20s`).
    pub async fn wait(&self, id: i64, wait: &str) -> Result<TaskDetail, ClientError> {
        self.read(
            self.http
                .get(self.url(&format!("/tasks/{id}")))
                .query(&[("wait", wait)]),
        )
        .await
    }

    /// `GET /tasks` with filters.
    pub async fn list(
        &self,
        status: Option<&str>,
        task_type: Option<&str>,
        limit: usize,
        before: Option<i64>,
    ) -> Result<TaskPage, ClientError> {
        let mut query = vec![("limit", limit.to_string())];
        if let Some(before) = before {
            query.push(("before", before.to_string()));
        }
        if let Some(status) = status {
            query.push(("status", status.to_string()));
        }
        if let Some(task_type) = task_type {
            query.push(("type", task_type.to_string()));
        }
        self.read(self.http.get(self.url("/tasks")).query(&query))
            .await
    }

    /// `POST /tasks/{id}/retry`.
    pub async fn retry(&self, id: i64) -> Result<TaskView, ClientError> {
        self.change(self.http.post(self.url(&format!("/tasks/{id}/retry"))))
            .await
    }

    /// `GET /tasks` with any of its query parameters (`status`, `type`, `error_contains`,
    /// `since`, `until`, `limit`, `before`).
    pub async fn list_where(&self, query: &[(&str, String)]) -> Result<TaskPage, ClientError> {
        self.read(self.http.get(self.url("/tasks")).query(query))
            .await
    }

    /// `POST /tasks/retry` (`action` = `retry`) or `POST /tasks/discard` (`discard`) with a
    /// filter body (`ids`, `task_type`, `status`, `error_contains`, `since`, `until`,
    /// `dry_run`, `all`).
    pub async fn bulk(&self, action: &str, filter: &Value) -> Result<BulkResponse, ClientError> {
        self.change(
            self.http
                .post(self.url(&format!("/tasks/{action}")))
                .json(filter),
        )
        .await
    }

    /// `POST /types/{name}/pause`, or `/resume` when `paused` is false.
    pub async fn pause(&self, task_type: &str, paused: bool) -> Result<PauseView, ClientError> {
        let action = if paused { "pause" } else { "resume" };
        self.change(
            self.http
                .post(self.url(&format!("/types/{task_type}/{action}"))),
        )
        .await
    }

    /// `GET /types`.
    pub async fn types(&self) -> Result<TypesView, ClientError> {
        self.read(self.http.get(self.url("/types"))).await
    }

    /// `POST /tasks/{id}/cancel`.
    pub async fn cancel(&self, id: i64) -> Result<TaskView, ClientError> {
        self.change(self.http.post(self.url(&format!("/tasks/{id}/cancel"))))
            .await
    }

    /// `GET /schedules`.
    pub async fn schedules(&self) -> Result<SchedulesView, ClientError> {
        self.read(self.http.get(self.url("/schedules"))).await
    }

    /// `GET /plugins`.
    pub async fn plugins(&self) -> Result<PluginsView, ClientError> {
        self.read(self.http.get(self.url("/plugins"))).await
    }

    /// `GET /alerts`.
    pub async fn alerts(&self) -> Result<AlertsView, ClientError> {
        self.read(self.http.get(self.url("/alerts"))).await
    }

    /// `POST /alerts/drill`: the drill's report, also when a channel failed (502, whose body
    /// carries the report under `drill` beside the error).
    pub async fn drill(&self) -> Result<DrillAnswer, ClientError> {
        let mut request = self.http.post(self.url("/alerts/drill"));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|source| ClientError::Unreachable {
                url: self.base.clone(),
                source,
            })?;
        let status = response.status();
        let mut body: Value = response.json().await.map_err(|e| ClientError::Protocol {
            url: self.base.clone(),
            detail: format!("status {status}, body is not JSON: {e}"),
        })?;
        if status.is_success() {
            return Ok(DrillAnswer {
                report: self.typed(body)?,
                failure: None,
            });
        }
        if body["drill"].is_object() {
            let failure = body["error"]["message"].as_str().map(str::to_string);
            return Ok(DrillAnswer {
                report: self.typed(body["drill"].take())?,
                failure,
            });
        }
        let field = |name: &str| body["error"][name].as_str().unwrap_or_default().to_string();
        Err(ClientError::Api {
            status: status.as_u16(),
            code: field("code"),
            message: field("message"),
        })
    }

    /// `GET /health`.
    pub async fn health(&self) -> Result<Health, ClientError> {
        self.read(self.http.get(self.url("/health"))).await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// An answer's body as the view type its route serializes.
    fn typed<T: DeserializeOwned>(&self, body: Value) -> Result<T, ClientError> {
        serde_json::from_value(body).map_err(|e| ClientError::Protocol {
            url: self.base.clone(),
            detail: format!("the body is not the expected {}: {e}", short_name::<T>()),
        })
    }

    /// Sends a read, with the read token if there is one.
    async fn read<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        self.send(request, self.read_token.as_ref().or(self.token.as_ref()))
            .await
    }

    /// Sends a deploy, promotion or rollback, with the deploy token if there is one.
    async fn deploy_change<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        self.send(request, self.deploy_token.as_ref().or(self.token.as_ref()))
            .await
    }

    /// Sends a change, with the API token.
    async fn change<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        self.send(request, self.token.as_ref()).await
    }

    async fn send<T: DeserializeOwned>(
        &self,
        mut request: reqwest::RequestBuilder,
        token: Option<&String>,
    ) -> Result<T, ClientError> {
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|source| ClientError::Unreachable {
                url: self.base.clone(),
                source,
            })?;
        let status = response.status();
        let body: Value = response.json().await.map_err(|e| ClientError::Protocol {
            url: self.base.clone(),
            detail: format!("status {status}, body is not JSON: {e}"),
        })?;
        if status.is_success() {
            return self.typed(body);
        }
        let field = |name: &str| body["error"][name].as_str().unwrap_or_default().to_string();
        Err(ClientError::Api {
            status: status.as_u16(),
            code: field("code"),
            message: field("message"),
        })
    }
}

/// A type's name without its module path, for messages: `TaskView`.
fn short_name<T>() -> &'static str {
    let name = std::any::type_name::<T>();
    name.rsplit("::").next().unwrap_or(name)
}
