//! Multi-row `INSERT`s written by hand, each value moved into the statement once: SeaORM's
//! builder copies every value into its statement and again when it builds the text, and a
//! job's insert and events were a third of a no-op job's allocations that way.

use std::fmt::Write as _;

use sea_orm::{DbBackend, Statement, Value};

/// `INSERT INTO table (columns…) VALUES (…), (…)`, a row at a time.
pub(super) struct MultiInsert {
    backend: DbBackend,
    sql: String,
    values: Vec<Value>,
    columns: usize,
}

impl MultiInsert {
    /// A statement into `table` whose rows give `columns` in this order. The names are the
    /// schema's own (quoted here, so none can be read as a keyword).
    pub(super) fn new<'a>(backend: DbBackend, table: &str, columns: impl IntoIterator<Item = &'a str>) -> MultiInsert {
        let mut sql = format!("INSERT INTO \"{table}\" (");
        let mut count = 0;
        for column in columns {
            if count > 0 {
                sql.push_str(", ");
            }
            sql.push('"');
            sql.push_str(column);
            sql.push('"');
            count += 1;
        }
        sql.push_str(") VALUES ");
        MultiInsert { backend, sql, values: Vec::new(), columns: count }
    }

    /// One row: exactly as many values as the statement has columns, in their order.
    ///
    /// # Panics
    /// When `values` gives another number of values (a bug of the caller's, not of its input).
    pub(super) fn row(&mut self, values: impl IntoIterator<Item = Value>) {
        self.sql.push_str(if self.values.is_empty() { "(" } else { ", (" });
        let before = self.values.len();
        for value in values {
            if self.values.len() > before {
                self.sql.push_str(", ");
            }
            self.values.push(value);
            match self.backend {
                // Writing to a String cannot fail.
                DbBackend::Postgres => {
                    let _ = write!(self.sql, "${}", self.values.len());
                }
                _ => self.sql.push('?'),
            }
        }
        assert_eq!(self.values.len() - before, self.columns, "a row of a multi-row insert with a value per column");
        self.sql.push(')');
    }

    pub(super) fn into_statement(self) -> Statement {
        Statement::from_sql_and_values(self.backend, self.sql, self.values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_follow_the_backend_and_number_across_rows() {
        let mut insert = MultiInsert::new(DbBackend::Postgres, "t", ["a", "order"]);
        insert.row([Value::from(1), Value::from("x")]);
        insert.row([Value::from(2), Value::from("y")]);
        let statement = insert.into_statement();
        assert_eq!(statement.sql, r#"INSERT INTO "t" ("a", "order") VALUES ($1, $2), ($3, $4)"#);
        assert_eq!(statement.values.map(|values| values.0.len()), Some(4));

        let mut insert = MultiInsert::new(DbBackend::Sqlite, "t", ["a"]);
        insert.row([Value::from(1)]);
        insert.row([Value::from(2)]);
        assert_eq!(insert.into_statement().sql, r#"INSERT INTO "t" ("a") VALUES (?), (?)"#);
    }

    #[test]
    #[should_panic(expected = "a value per column")]
    fn a_short_row_is_a_bug() {
        let mut insert = MultiInsert::new(DbBackend::Sqlite, "t", ["a", "b"]);
        insert.row([Value::from(1)]);
    }
}
