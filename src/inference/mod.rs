//! Inference: the libtorch actor that holds a TorchScript model, and the coordinator
//! operations that use it (`compute_embeddings`, `nearest_neighbours`,
//! `transfer_annotations`), with the sets of vectors (and their labels) they store.
//!
//! The tokeniser and the stored sets are always built, so any build serves stored sets; the
//! actor, the default model and the operations need the cargo feature `inference` (libtorch).
//! Without it their submissions are refused as `operation_unavailable`.

pub mod api;
pub mod batches;
pub mod entity;
pub mod labels;
pub mod sets;
pub mod settings;
pub mod tokenizer;

#[cfg(feature = "inference")]
pub mod actor;
#[cfg(feature = "inference")]
pub mod check;
#[cfg(feature = "inference")]
pub mod index;
#[cfg(feature = "inference")]
pub mod model;
#[cfg(feature = "inference")]
pub mod neighbours;
#[cfg(feature = "inference")]
pub mod ops;
#[cfg(feature = "inference")]
pub mod ranking;
#[cfg(feature = "inference")]
pub mod search;
#[cfg(feature = "inference")]
pub mod transfer;

use crate::ops::OperationRegistry;
pub use settings::InferenceSettings;

/// The operations of this capability, by name.
pub const OPERATIONS: [&str; 6] = [
    "compute_embeddings",
    "compute_embeddings.batch",
    "embeddings.index",
    "nearest_neighbours",
    "nearest_neighbours.batch",
    "transfer_annotations",
];

/// Adds the inference operations to `registry`, one inference actor behind them for the
/// whole process; operations of the same names already there are kept.
#[cfg(feature = "inference")]
pub fn register(registry: OperationRegistry, settings: &InferenceSettings) -> OperationRegistry {
    use std::sync::Arc;

    if OPERATIONS.iter().any(|name| registry.get(name).is_some()) {
        return registry;
    }
    let tokenizer = match tokenizer::Tokenizer::from_settings(settings) {
        Ok(tokenizer) => tokenizer,
        Err(reason) => {
            tracing::error!(%reason, "the inference operations are unavailable");
            return OPERATIONS.iter().fold(registry, |registry, name| registry.without(name, &reason));
        }
    };
    let inference = actor::Inference::new(settings.clone());
    let limits = ops::BatchLimits { rows: settings.batch_size, tokens: settings.max_batch_tokens };
    let index = settings.index.clone();
    let coordinator = ops::Coordinator {
        tokenizer: tokenizer.clone(),
        limits,
        queue: settings.queue.clone(),
        write_queue: settings.write_queue.clone(),
        index: index.clone(),
    };
    registry
        .with(ops::ComputeEmbeddings(coordinator.clone()))
        .with(ops::EmbedBatch { inference: inference.clone(), tokenizer: tokenizer.clone() })
        .with(index::build::BuildIndex { settings: index.clone() })
        .with(search::NearestNeighbours(coordinator.clone()))
        .with(transfer::TransferAnnotations(coordinator))
        .with(search::NeighboursBatch { inference, tokenizer, ranker: Arc::new(ranking::Ranker::new(&index)) })
}

/// Without libtorch: the inference operations are named, and refused as unavailable.
#[cfg(not(feature = "inference"))]
pub fn register(registry: OperationRegistry, _settings: &InferenceSettings) -> OperationRegistry {
    let reason = "this yardmaster was built without the `inference` feature (libtorch)";
    OPERATIONS.iter().fold(registry, |registry, name| registry.without(name, reason))
}

/// The inference API: stored embedding sets.
pub const ROUTES: &[crate::http::Route] = &[
    crate::http::Route {
        path: "/embeddings/{set}",
        allow: crate::http::READ,
        access: crate::http::Access::Member,
        handlers: |r| r.route(crate::http::read().to(api::get)),
    },
    crate::http::Route {
        path: "/embeddings/{set}/labels",
        allow: crate::http::PUT,
        access: crate::http::Access::Member,
        handlers: |r| r.route(actix_web::web::put().to(labels::put)),
    },
];

#[derive(utoipa::OpenApi)]
#[openapi(paths(api::get, labels::put), tags((name = "inference", description = "Stored embedding sets")))]
struct Doc;

pub const SURFACE: crate::http::Surface =
    crate::http::Surface { routes: ROUTES, document: <Doc as utoipa::OpenApi>::openapi };
