//! Every SQL statement about registered types: register (insert, or revive a soft-deleted
//! one with a compare-and-set on `deleted_at`), resolve a submission's reference, list,
//! and the sweeper's soft delete of types no live worker serves and no job waits for.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder,
    Statement,
};
use serde::Serialize;
use serde_json::Value;

use super::entity::job_type::{self, Model};
use super::names::{TypeName, TypeReference};
use super::schema::{self, Validator};
use crate::domain::RoomId;
use crate::store::clock;

/// A type as listed.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TypeInfo {
    /// `room:category:name`: what jobs of this type carry as `operation`.
    pub id: String,
    pub room: String,
    pub category: String,
    pub name: String,
    /// The JSON Schema payloads are checked against; `null` for a built-in operation.
    pub schema: Option<Value>,
    /// False once soft-deleted (no live worker, no pending job); a registration revives it.
    pub active: bool,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// What a registration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    Created,
    /// It was soft-deleted; it is active again with the new schema.
    Revived,
    /// Active already with this very schema: nothing changed.
    Unchanged,
}

#[derive(Debug, thiserror::Error)]
pub enum TypeError {
    #[error("category {0:?} is not allowed here; allowed: {1}")]
    InvalidCategory(String, String),
    #[error("{0}")]
    InvalidSchema(String),
    #[error("type {0} is registered with another schema; it changes only once it is no longer active")]
    SchemaConflict(String),
    #[error("no active type {0}")]
    NotFound(String),
    #[error(transparent)]
    Database(#[from] DbErr),
}

/// A submission's type, found: its full name and compiled schema.
#[derive(Clone)]
pub struct Resolved {
    pub name: TypeName,
    pub validator: Arc<Validator>,
}

/// Compiled schemas by full name, with the `updated_at` each was compiled for.
type Compiled = HashMap<String, (DateTime<Utc>, Arc<Validator>)>;

pub struct TypeBook {
    db: DatabaseConnection,
    categories: BTreeSet<String>,
    /// Compiled schemas by full name, with the `updated_at` they were compiled for.
    compiled: Mutex<Compiled>,
}

impl TypeBook {
    pub fn new(db: DatabaseConnection, categories: BTreeSet<String>) -> Self {
        TypeBook { db, categories, compiled: Mutex::default() }
    }

    /// Registers `name` with `schema`: a new type, a revival of a soft-deleted one (with the
    /// new schema), or the same registration again; an active type with another schema is
    /// a [`TypeError::SchemaConflict`].
    pub async fn register(&self, name: &TypeName, schema: Value) -> Result<(TypeInfo, Registered), TypeError> {
        if !self.categories.contains(&name.category) {
            let allowed: Vec<&str> = self.categories.iter().map(String::as_str).collect();
            return Err(TypeError::InvalidCategory(name.category.clone(), allowed.join(", ")));
        }
        schema::compile(&schema).map_err(TypeError::InvalidSchema)?;
        let now = clock::now();
        let row = job_type::ActiveModel {
            room: Set(name.room.as_str().to_owned()),
            category: Set(name.category.clone()),
            name: Set(name.name.clone()),
            schema: Set(schema.clone()),
            created_at: Set(now),
            updated_at: Set(now),
            deleted_at: Set(None),
        };
        let key = [job_type::Column::Room, job_type::Column::Category, job_type::Column::Name];
        let inserted =
            job_type::Entity::insert(row).on_conflict_do_nothing_on(key).exec_without_returning(&self.db).await?;
        if matches!(inserted, sea_orm::TryInsertResult::Inserted(1)) {
            return Ok((to_info(self.row(name).await?.ok_or_else(|| gone(name))?), Registered::Created));
        }
        // It exists: the same schema is a repeat, another one a conflict unless the type was
        // soft-deleted, which a compare-and-set on that deletion revives.
        for _ in 0..3 {
            let existing = self.row(name).await?.ok_or_else(|| gone(name))?;
            let Some(deleted_at) = existing.deleted_at else {
                return match existing.schema == schema {
                    true => Ok((to_info(existing), Registered::Unchanged)),
                    false => Err(TypeError::SchemaConflict(name.full())),
                };
            };
            let revived = job_type::Entity::update_many()
                .col_expr(job_type::Column::Schema, Expr::value(schema.clone()))
                .col_expr(job_type::Column::UpdatedAt, Expr::value(clock::now()))
                .col_expr(job_type::Column::DeletedAt, Expr::value(Option::<DateTime<Utc>>::None))
                .filter(this(name))
                .filter(job_type::Column::DeletedAt.eq(deleted_at))
                .exec(&self.db)
                .await?;
            if revived.rows_affected == 1 {
                return Ok((to_info(self.row(name).await?.ok_or_else(|| gone(name))?), Registered::Revived));
            }
        }
        Err(TypeError::SchemaConflict(name.full()))
    }

    async fn row(&self, name: &TypeName) -> Result<Option<Model>, DbErr> {
        job_type::Entity::find().filter(this(name)).one(&self.db).await
    }

    /// The active type a submission in `room` names: `category:name` is looked up in `room`,
    /// then in `@global`; a full name must be `room`'s own or `@global`'s.
    pub async fn resolve(&self, room: &RoomId, reference: &TypeReference) -> Result<Resolved, TypeError> {
        let candidates = match reference {
            TypeReference::Full(name) => vec![name.clone()],
            TypeReference::Short { category, name } => {
                let here = TypeName { room: room.clone(), category: category.clone(), name: name.clone() };
                let global = RoomId::parse(RoomId::GLOBAL).map(|global| TypeName { room: global, ..here.clone() });
                [Some(here), global.ok()].into_iter().flatten().collect()
            }
        };
        for name in &candidates {
            if name.room != *room && name.room.as_str() != RoomId::GLOBAL {
                continue;
            }
            let Some(row) = self.row(name).await?.filter(|row| row.deleted_at.is_none()) else { continue };
            return Ok(Resolved { name: name.clone(), validator: self.validator(name, &row)? });
        }
        let asked = match reference {
            TypeReference::Full(name) => name.full(),
            TypeReference::Short { category, name } => format!("{category}:{name} (in {room} or @global)"),
        };
        Err(TypeError::NotFound(asked))
    }

    /// The compiled schema of a row, compiled once per registration.
    fn validator(&self, name: &TypeName, row: &Model) -> Result<Arc<Validator>, TypeError> {
        let key = name.full();
        let mut compiled = self.compiled.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, validator)) = compiled.get(&key).filter(|(at, _)| *at == row.updated_at) {
            return Ok(validator.clone());
        }
        let validator = Arc::new(schema::compile(&row.schema).map_err(TypeError::InvalidSchema)?);
        compiled.insert(key, (row.updated_at, validator.clone()));
        Ok(validator)
    }

    /// Active types of these rooms (`None`: every room), by room, category and name.
    pub async fn list(&self, rooms: Option<&[String]>) -> Result<Vec<TypeInfo>, DbErr> {
        let mut query = job_type::Entity::find().filter(job_type::Column::DeletedAt.is_null());
        if let Some(rooms) = rooms {
            query = query.filter(job_type::Column::Room.is_in(rooms.iter().map(String::as_str)));
        }
        let rows = query
            .order_by_asc(job_type::Column::Room)
            .order_by_asc(job_type::Column::Category)
            .order_by_asc(job_type::Column::Name)
            .all(&self.db)
            .await?;
        Ok(rows.into_iter().map(to_info).collect())
    }

    /// Whether `name` is registered and active (a worker may serve only such types).
    pub async fn is_active(&self, name: &TypeName) -> Result<bool, DbErr> {
        Ok(self.row(name).await?.is_some_and(|row| row.deleted_at.is_none()))
    }

    /// Soft-deletes active types registered or revived longer than `grace` ago that no
    /// live worker serves and no QUEUED or RUNNING job needs, in one compare-and-set
    /// statement; returns how many.
    pub async fn sweep_orphans(&self, grace: std::time::Duration) -> Result<u64, DbErr> {
        let backend = self.db.get_database_backend();
        let now = clock::now();
        let young = now - chrono::Duration::from_std(grace).unwrap_or_default();
        let sql = "UPDATE job_type SET deleted_at = $1 \
             WHERE deleted_at IS NULL AND updated_at < $2 \
             AND NOT EXISTS (SELECT 1 FROM remote_worker_type t JOIN remote_worker w ON w.id = t.worker_id \
                 WHERE t.type_name = job_type.room || ':' || job_type.category || ':' || job_type.name \
                 AND w.gone_at IS NULL AND w.expires_at > $1) \
             AND NOT EXISTS (SELECT 1 FROM job WHERE job.status IN ('queued', 'running') AND job.queue = '@remote' \
                 AND job.operation = job_type.room || ':' || job_type.category || ':' || job_type.name)";
        let sql = match backend {
            sea_orm::DbBackend::Postgres => sql.to_owned(),
            _ => sql.replace("$1", "?1").replace("$2", "?2"),
        };
        let statement = Statement::from_sql_and_values(backend, sql, [now.into(), young.into()]);
        Ok(self.db.execute_raw(statement).await?.rows_affected())
    }
}

fn this(name: &TypeName) -> sea_orm::Condition {
    sea_orm::Condition::all()
        .add(job_type::Column::Room.eq(name.room.as_str()))
        .add(job_type::Column::Category.eq(name.category.as_str()))
        .add(job_type::Column::Name.eq(name.name.as_str()))
}

fn gone(name: &TypeName) -> TypeError {
    TypeError::NotFound(name.full())
}

fn to_info(row: Model) -> TypeInfo {
    TypeInfo {
        id: format!("{}:{}:{}", row.room, row.category, row.name),
        room: row.room,
        category: row.category,
        name: row.name,
        schema: Some(row.schema),
        active: row.deleted_at.is_none(),
        created_at: Some(row.created_at),
        updated_at: Some(row.updated_at),
    }
}
