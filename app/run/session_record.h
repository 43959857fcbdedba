#pragma once
// Writing a run into a session database: what kvscope-cli run / sweep and the GUI's Run window record
// (blob and metric names are listed in docs/sessions.md "What kvscope writes"), so sessions are
// alike whichever front end made them.
#include <functional>
#include <optional>
#include <string>

#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/sessions/session_store.h"

namespace kvscope::run {

struct RunOptions;

/// The prompt of `options` as a session records it: the text tokenized (a chat prompt's rendered
/// text) and, for a chat prompt, its template's source and messages (JSON). Tokens are left empty:
/// run_info takes them from the request.
sessions::PromptInfo recorded_prompt(const RunOptions& options);

/// Identity of a run before it starts (begin_run writes it, so a killed run stays visible). The
/// prompt's tokens are the request's prompt_ids.
sessions::RunInfo run_info(const Model& model, const Pipeline* pipeline, const PolicyRegistry& registry,
                           const GenerateRequest& req, const sessions::PromptInfo& prompt, const std::string& name,
                           const std::optional<std::string>& sweep_key);
/// The same for a prompt given as text.
sessions::RunInfo run_info(const Model& model, const Pipeline* pipeline, const PolicyRegistry& registry,
                           const GenerateRequest& req, const std::string& prompt_text, const std::string& name,
                           const std::optional<std::string>& sweep_key);

/// Writes outputs, per-step metrics, summary metrics and captured blobs, then marks the run complete.
void record_results(sessions::SessionStore& store, int64_t run, const Model& model, const GenerateRequest& req,
                    const GenerateResult& res);

/// begin_run, generate, record_results (or fail_run and rethrow). Returns the result; `run_id` is set
/// as soon as the run exists in the database. A run that may go past the model's context (allowed by
/// RunOptions::allow_beyond_context) gets the summary metric "beyond_context_tokens" (how many
/// positions past it) when it begins.
GenerateResult generate_into_store(sessions::SessionStore& store, const Engine& engine, const Pipeline* pipeline,
                                   const PolicyRegistry& registry, const GenerateRequest& req,
                                   const sessions::PromptInfo& prompt, const std::string& name,
                                   const std::optional<std::string>& sweep_key, int64_t& run_id,
                                   const std::function<void(int32_t)>& on_token = {});
/// The same for a prompt given as text.
GenerateResult generate_into_store(sessions::SessionStore& store, const Engine& engine, const Pipeline* pipeline,
                                   const PolicyRegistry& registry, const GenerateRequest& req,
                                   const std::string& prompt_text, const std::string& name,
                                   const std::optional<std::string>& sweep_key, int64_t& run_id,
                                   const std::function<void(int32_t)>& on_token = {});

}  // namespace kvscope::run
