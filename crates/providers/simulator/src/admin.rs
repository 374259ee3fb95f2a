//! The admin HTTP API of the simulated cloud (JSON), mounted by the gateway at the root of its
//! HTTP port. It is the operator's console: its calls bypass the simulated API rate limit.
//!
//! | method and path | does |
//! |---|---|
//! | `GET /simulator/v1/info` | region, zones, pools, state file |
//! | `GET /simulator/v1/instances` | every instance, terminated ones included |
//! | `POST /simulator/v1/instances` | launch one ([`NewInstance`]); 201 with the instance |
//! | `POST /simulator/v1/instances/{id}/stop` (`start`, `terminate`) | power action; 404 for an unknown id, 409 for a terminated one |
//! | `GET /simulator/v1/load-balancers` | every load balancer |
//! | `GET /simulator/v1/routes` | every route, with its cluster |
//! | `POST /simulator/v1/routes` | add one out of band ([`NewRoute`]); 201 with the route, 409 when its destination is routed already |
//! | `GET /simulator/v1/knobs`, `PUT /simulator/v1/knobs` | read; merge a partial update ([`crate::KnobsPatch`]) |
//! | `GET /simulator/v1/stats`, `POST /simulator/v1/stats/reset` | call counters |
//!
//! Errors are `{"error": "<message>"}` with 400 (malformed), 404, 409 or 500.

use std::sync::Arc;

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::{Serialize, de::DeserializeOwned};

use crate::{KnobsPatch, NewInstance, NewRoute, Simulator, SimulatorError};

/// Path prefix of every admin route.
pub const PREFIX: &str = "/simulator/v1";

/// The admin API over `sim`; every path is under `/simulator/v1/`.
pub fn admin_router(sim: Arc<Simulator>) -> Router {
    Router::new()
        .route(&format!("{PREFIX}/info"), get(info))
        .route(
            &format!("{PREFIX}/instances"),
            get(list_instances).post(add_instance),
        )
        .route(&format!("{PREFIX}/instances/{{id}}/{{action}}"), post(act))
        .route(&format!("{PREFIX}/load-balancers"), get(list_load_balancers))
        .route(&format!("{PREFIX}/routes"), get(list_routes).post(add_route))
        .route(&format!("{PREFIX}/knobs"), get(get_knobs).put(put_knobs))
        .route(&format!("{PREFIX}/stats"), get(get_stats))
        .route(&format!("{PREFIX}/stats/reset"), post(reset_stats))
        .with_state(sim)
}

/// An error answer.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        #[derive(Serialize)]
        struct Body {
            error: String,
        }
        (self.0, Json(Body { error: self.1 })).into_response()
    }
}

impl From<SimulatorError> for ApiError {
    fn from(e: SimulatorError) -> Self {
        let code = match &e {
            SimulatorError::NotFound(_) => StatusCode::NOT_FOUND,
            SimulatorError::Conflict(_) => StatusCode::CONFLICT,
            SimulatorError::Invalid(_) | SimulatorError::Inventory(_) => StatusCode::BAD_REQUEST,
            SimulatorError::StateFile(_) | SimulatorError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(code, e.to_string())
    }
}

/// Parses a JSON body ourselves, so a bad one gets a 400 with serde's explanation.
fn json_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("invalid request body: {e}")))
}

/// Runs a state change (file I/O) off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SimulatorError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| {
            ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the change did not finish: {e}"),
            )
        })?
        .map_err(ApiError::from)
}

async fn info(State(sim): State<Arc<Simulator>>) -> impl IntoResponse {
    Json(sim.info())
}

async fn list_instances(State(sim): State<Arc<Simulator>>) -> impl IntoResponse {
    Json(sim.instances())
}

async fn add_instance(State(sim): State<Arc<Simulator>>, body: Bytes) -> Result<impl IntoResponse, ApiError> {
    let spec: NewInstance = json_body(&body)?;
    let inst = blocking(move || sim.add_instance(spec)).await?;
    Ok((StatusCode::CREATED, Json(inst)))
}

async fn act(
    State(sim): State<Arc<Simulator>>,
    Path((id, action)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let inst = match action.as_str() {
        "stop" => blocking(move || sim.stop_instance(&id)).await?,
        "start" => blocking(move || sim.start_instance(&id)).await?,
        "terminate" => blocking(move || sim.terminate_instance(&id)).await?,
        other => {
            return Err(ApiError(
                StatusCode::NOT_FOUND,
                format!("unknown action {other:?}; use stop, start or terminate"),
            ));
        }
    };
    Ok(Json(inst))
}

async fn list_load_balancers(State(sim): State<Arc<Simulator>>) -> impl IntoResponse {
    Json(sim.load_balancers())
}

async fn list_routes(State(sim): State<Arc<Simulator>>) -> impl IntoResponse {
    Json(sim.routes())
}

async fn add_route(State(sim): State<Arc<Simulator>>, body: Bytes) -> Result<impl IntoResponse, ApiError> {
    let spec: NewRoute = json_body(&body)?;
    let route = blocking(move || sim.add_route(spec)).await?;
    Ok((StatusCode::CREATED, Json(route)))
}

async fn get_knobs(State(sim): State<Arc<Simulator>>) -> impl IntoResponse {
    Json(sim.knobs())
}

async fn put_knobs(State(sim): State<Arc<Simulator>>, body: Bytes) -> Result<impl IntoResponse, ApiError> {
    let patch: KnobsPatch = json_body(&body)?;
    Ok(Json(sim.update_knobs(&patch)?))
}

async fn get_stats(State(sim): State<Arc<Simulator>>) -> impl IntoResponse {
    Json(sim.stats())
}

async fn reset_stats(State(sim): State<Arc<Simulator>>) -> impl IntoResponse {
    sim.reset_stats();
    Json(sim.stats())
}
