//! Managing indices: creating one (with the configured replicas), deleting one, refreshing,
//! asking whether some exist.

use elasticsearch::indices::{
    IndicesCreateParts, IndicesDeleteParts, IndicesExistsParts, IndicesPutMappingParts,
    IndicesRefreshParts,
};
use serde_json::{json, Value};

use super::request::Retry;
use super::response::error_of;
use super::ElasticStore;
use crate::error::Result;

impl ElasticStore {
    pub(super) async fn create_index_if_missing(&self, index: &str, body: &Value) -> Result<bool> {
        let mut body = body.clone();
        if let (Some(replicas), Value::Object(fields)) = (self.inner.config.replicas, &mut body) {
            let settings = fields.entry("settings").or_insert_with(|| json!({}));
            settings["number_of_replicas"] = json!(replicas);
        }
        let context = format!("creating index `{index}`");
        let indices_api = self.inner.client.indices();
        let (status, answer) = self
            .send(&context, Retry::Always, || {
                indices_api
                    .create(IndicesCreateParts::Index(index))
                    .body(body.clone())
                    .send()
            })
            .await?;
        match status {
            200..=299 => Ok(true),
            _ if answer["error"]["type"] == "resource_already_exists_exception" => Ok(false),
            _ => Err(error_of(&context, index, "", status, &answer)),
        }
    }

    /// `PUT /index/_mapping`: adds fields; sending it again changes nothing.
    pub(super) async fn put_mapping(&self, index: &str, mappings: &Value) -> Result<()> {
        let context = format!("extending the mapping of `{index}`");
        let indices = [index];
        let indices_api = self.inner.client.indices();
        self.ok(&context, index, "", Retry::Always, || {
            indices_api
                .put_mapping(IndicesPutMappingParts::Index(&indices))
                .body(mappings.clone())
                .send()
        })
        .await
        .map(|_| ())
    }

    pub(super) async fn remove_index(&self, index: &str) -> Result<bool> {
        let context = format!("deleting index `{index}`");
        let indices = [index];
        let indices_api = self.inner.client.indices();
        let (status, answer) = self
            .send(&context, Retry::Always, || {
                indices_api
                    .delete(IndicesDeleteParts::Index(&indices))
                    .send()
            })
            .await?;
        match status {
            200..=299 => Ok(true),
            404 => Ok(false),
            _ => Err(error_of(&context, index, "", status, &answer)),
        }
    }

    pub(super) async fn refresh_index(&self, index: &str) -> Result<()> {
        let context = format!("refreshing `{index}`");
        let indices = [index];
        let indices_api = self.inner.client.indices();
        self.ok(&context, index, "", Retry::Always, || {
            indices_api
                .refresh(IndicesRefreshParts::Index(&indices))
                .send()
        })
        .await
        .map(|_| ())
    }

    /// `HEAD /a,b,c`: 200 if all exist, 404 if one does not.
    pub(super) async fn all_exist(&self, indices: &[&str]) -> Result<bool> {
        if indices.is_empty() {
            return Ok(true);
        }
        let context = format!("asking whether {} exist", indices.join(", "));
        let indices_api = self.inner.client.indices();
        let (status, answer) = self
            .send(&context, Retry::Always, || {
                indices_api
                    .exists(IndicesExistsParts::Index(indices))
                    .send()
            })
            .await?;
        match status {
            200..=299 => Ok(true),
            404 => Ok(false),
            _ => Err(error_of(&context, indices[0], "", status, &answer)),
        }
    }
}
