//! The OpenAPI description as this host serves it: the description utoipa derives from the
//! handlers and types, completed with what only the running host knows (whether it requires a
//! token, its batch limit, its task types) and with what utoipa cannot say (responses every
//! route shares, the run_at/delay exclusion, links between operations).

use serde_json::{Value, json};

use crate::config::Config;

/// The description for a host with `config`, before its task types are filled in.
pub fn describe(config: &Config, base: utoipa::openapi::OpenApi) -> Value {
    let mut spec = serde_json::to_value(base).expect("the OpenAPI description serializes");
    let protected = config.api_token.is_some();
    if let Some(paths) = spec["paths"].as_object_mut() {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for (method, operation) in item.iter_mut() {
                let responses = &mut operation["responses"];
                let mut add = |status: &str, description: &str| {
                    if responses.get(status).is_none() {
                        responses[status] = error_response(description);
                    }
                };
                add(
                    "403",
                    if method == "get" {
                        "Refused: the `Host` is not this host's (a guard against DNS rebinding)"
                    } else {
                        "Refused: the `Host` is not this host's (a guard against DNS rebinding), or a browser sent the change from another origin"
                    },
                );
                if path == "/health" {
                    continue;
                }
                add(
                    "503",
                    "The task database does not answer; nothing was changed",
                );
                if protected {
                    add(
                        "401",
                        if method == "get" {
                            "Missing or wrong token: reads need the read token or the API token"
                        } else {
                            "Missing or wrong token: changes need the API token"
                        },
                    );
                    operation["security"] = json!([{ "bearer": [] }]);
                }
            }
        }
    }
    let schemas = &mut spec["components"]["schemas"];
    // `run_at` and `delay` exclude each other (either may be null).
    schemas["EnqueueRequest"]["not"] = json!({
        "required": ["run_at", "delay"],
        "properties": {
            "run_at": { "type": "string" },
            "delay": { "type": ["number", "string"] }
        }
    });
    schemas["BatchRequest"]["properties"]["tasks"]["maxItems"] = json!(config.max_batch);
    // A string payload that starts with `{` or `[` is a document encoded twice: refused.
    schemas["EnqueueRequest"]["properties"]["payload"]["not"] =
        json!({ "type": "string", "pattern": crate::enqueue::DOUBLE_ENCODED_PATTERN });
    // `wait` up to this host's `max_wait`.
    if let Some(parameters) = spec["paths"]["/tasks/{id}"]["get"]["parameters"].as_array_mut() {
        for parameter in parameters.iter_mut().filter(|p| p["name"] == "wait") {
            parameter["schema"]["pattern"] = json!(super::durations::wait_pattern(config.max_wait));
        }
    }
    add_links(&mut spec);
    spec
}

/// The description with the task types this host runs now as `task_type`'s values.
pub fn with_task_types(spec: &Value, task_types: Vec<String>) -> Value {
    let mut spec = spec.clone();
    if !task_types.is_empty() {
        spec["components"]["schemas"]["EnqueueRequest"]["properties"]["task_type"]["enum"] =
            json!(task_types);
    }
    spec
}

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ErrorBody" } } }
    })
}

/// Links from each answer that names a task to the operations on that task, and from a page
/// to the next page.
fn add_links(spec: &mut Value) {
    let on_task = |id: &str, operations: &[&str]| -> Value {
        let links: serde_json::Map<String, Value> = operations
            .iter()
            .map(|operation| {
                let name = match *operation {
                    "get_task" => "GetTask",
                    "retry_task" => "RetryTask",
                    _ => "CancelTask",
                };
                (
                    name.to_string(),
                    json!({ "operationId": operation, "parameters": { "id": id } }),
                )
            })
            .collect();
        Value::Object(links)
    };
    let all = ["get_task", "retry_task", "cancel_task"];
    let paths = &mut spec["paths"];
    for status in ["200", "201"] {
        paths["/tasks"]["post"]["responses"][status]["links"] = on_task("$response.body#/id", &all);
    }
    paths["/tasks/batch"]["post"]["responses"]["201"]["links"] =
        on_task("$response.body#/tasks/0/id", &all);
    let mut page_links = on_task("$response.body#/tasks/0/id", &all);
    page_links["NextPage"] = json!({ "operationId": "list_tasks", "parameters": { "before": "$response.body#/next_before" } });
    paths["/tasks"]["get"]["responses"]["200"]["links"] = page_links;
    paths["/tasks/{id}"]["get"]["responses"]["200"]["links"] =
        on_task("$response.body#/id", &["retry_task", "cancel_task"]);
    paths["/tasks/{id}/retry"]["post"]["responses"]["200"]["links"] =
        on_task("$response.body#/id", &["get_task", "cancel_task"]);
    paths["/tasks/{id}/cancel"]["post"]["responses"]["200"]["links"] =
        on_task("$response.body#/id", &["get_task", "retry_task"]);
}
