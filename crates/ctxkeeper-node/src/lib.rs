//! The Node.js face of ctxkeeper: the N-API addon of the npm package `ctxkeeper-engine`
//! (`packages/ctxkeeper-node`, built by `scripts/nodepkg`).
//!
//! The addon is one class, `NativeSession`, with two methods: `run(op, json)` for the
//! operations that touch a store or an archive (a promise, computed on libuv's thread pool
//! so the event loop never waits for IO or a compaction) and `runSync(op, json)` for the
//! rest. Both take and answer JSON text (see [`ops`]); the package's `index.js` gives them
//! the API shape every face keeps (`ctxkeeper_embed`'s table, in camelCase):
//!
//! ```js
//! const { ContextManager } = require("ctxkeeper-engine");
//!
//! const cm = await ContextManager.open({ policy: "default", model: "gpt-4o", window: 16000 });
//! const prepared = await cm.prepare([{ role: "user", content: "Summarize the logs" }]);
//! const reply = await client.chat.completions.create({ model: "gpt-4o", ...prepared.params });
//! cm.usage(reply.usage);
//! await cm.ingest(reply.choices[0].message);
//! ```

pub mod ops;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use napi::bindgen_prelude::AsyncTask;
use napi::{Env, Task};
use napi_derive::napi;

/// One session (opened by `run("open", options)`).
#[napi]
#[derive(Debug, Default)]
pub struct NativeSession {
    handle: ops::Handle,
}

/// An operation run on libuv's thread pool.
#[derive(Debug)]
pub struct Operation {
    handle: ops::Handle,
    op: String,
    args: String,
}

impl Task for Operation {
    type Output = String;
    type JsValue = String;

    fn compute(&mut self) -> napi::Result<String> {
        Ok(execute(&self.handle, &self.op, &self.args))
    }

    fn resolve(&mut self, _env: Env, output: String) -> napi::Result<String> {
        Ok(output)
    }
}

fn execute(handle: &ops::Handle, op: &str, args: &str) -> String {
    let answer = match serde_json::from_str(args) {
        Ok(args) => ops::call(handle, op, args),
        Err(err) => serde_json::json!({"error": {
            "class": "InvalidInputError",
            "message": format!("arguments of {op} are not JSON: {err}"),
        }}),
    };
    answer.to_string()
}

#[napi]
impl NativeSession {
    #[napi(constructor)]
    pub fn new() -> NativeSession {
        NativeSession::default()
    }

    /// Runs `op` on a worker thread; resolves to its JSON envelope.
    #[napi]
    pub fn run(&self, op: String, args: String) -> AsyncTask<Operation> {
        AsyncTask::new(Operation {
            handle: self.handle.clone(),
            op,
            args,
        })
    }

    /// Runs `op` now; its JSON envelope. Operations that may do IO are refused here (see
    /// `ops::Handle::needs_worker`).
    #[napi]
    pub fn run_sync(&self, op: String, args: String) -> String {
        if self.handle.needs_worker(&op) {
            return serde_json::json!({"error": {
                "class": "CtxkeeperError",
                "message": format!("{op} touches the store: call it with run()"),
            }})
            .to_string();
        }
        execute(&self.handle, &op, &args)
    }
}

/// The presets `policy` accepts by name.
#[napi]
pub fn presets() -> Vec<String> {
    ctxkeeper::core::engine::presets::NAMES
        .iter()
        .map(|name| name.to_string())
        .collect()
}

/// The version of the engine this addon was built from.
#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
