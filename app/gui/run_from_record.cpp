#include "run_from_record.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "app_state.h"
#include "kvscope/core/budget.h"
#include "kvscope/core/tokenizer.h"

namespace kvscope::gui {
namespace {

/// The capture level a run ran at, from what it stored: per-layer arrays (attention, key cosines,
/// key PCA, channel statistics, decisive scores) or the Exact-TopK union only at "full"; head
/// summaries or a timeline at "summary" and above; nothing: "off".
std::string capture_level(const sessions::RunRecord& rec) {
  bool summary = false;
  for (const auto& b : rec.blobs) {
    if (b.name == "attention" || b.name == "cos_to_mean" || b.name == "keys_pca" || b.name == "channel_mean" ||
        b.name == "channel_cv" || b.name == "topk_unique" || b.name == "policy_score")
      return "full";
    if (b.name == "head_summary" || b.name.rfind("timeline.", 0) == 0) summary = true;
  }
  return summary ? "summary" : "off";
}

bool has_reference(const sessions::RunRecord& rec) {
  if (rec.row.summary.count("mean_kl")) return true;
  return std::any_of(rec.step_metrics.begin(), rec.step_metrics.end(),
                     [](const sessions::StepMetric& m) { return m.name == "kl"; });
}

}  // namespace

RunFill fill_from_run(const sessions::RunRecord& rec, const std::string& db, const RunRequest& base,
                      const Tokenizer* tokenizer, const std::vector<sessions::Turn>& turns) {
  RunFill out;
  RunRequest& f = out.form;
  f = base;
  const std::string id = "run #" + std::to_string(rec.row.id);
  // Model: a random-init run stored its config.json as the model's path (random weights of its shape).
  const std::string& path = rec.info.model.path;
  if (std::filesystem::path(path).extension() == ".json") {
    f.random_init = path;
    f.model_path.clear();
    out.notes.push_back("random weights of " + path + ": the seed is not recorded, the form's (" +
                        std::to_string(base.seed) + ") kept" +
                        (base.tokenizer_path.empty() ? "; choose a tokenizer to encode the prompt" : ""));
  } else {
    f.model_path = path;
    f.random_init.clear();
    if (!base.tokenizer_path.empty())
      out.notes.push_back("tokenizer override not recorded: cleared (the model's own tokenizer)");
    f.tokenizer_path.clear();
  }
  if (!rec.info.model.device.empty()) f.device = rec.info.model.device;
  if (!rec.info.model.dtype.empty()) f.dtype = rec.info.model.dtype;

  // Prompt: the text as given; token ids alone only through the tokenizer. A chat prompt of a user
  // message (after a system message) goes back to "chat template" with them; another conversation
  // (--messages) is its rendered text, tokenized as is (BOS never).
  const auto& ids = rec.info.prompt.tokens;
  f.chat = false;
  f.system.clear();
  bool bos_known = false;
  if (!rec.info.prompt.chat_template.empty()) {
    nlohmann::ordered_json messages;
    try {
      messages = nlohmann::ordered_json::parse(rec.info.prompt.chat_messages);
    } catch (const std::exception&) {
      messages = nullptr;
    }
    const auto is = [&](std::size_t i, const char* role) {
      return messages[i].is_object() && messages[i].value("role", "") == role && messages[i].contains("content") &&
             messages[i]["content"].is_string();
    };
    const bool user = messages.is_array() && (messages.size() == 1 || messages.size() == 2) &&
                      is(messages.size() - 1, "user") && (messages.size() == 1 || is(0, "system"));
    if (user) {
      f.chat = true;
      f.prompt = messages.back()["content"].get<std::string>();
      if (messages.size() == 2) f.system = messages[0]["content"].get<std::string>();
      f.bos = "auto";
    } else {
      f.prompt = rec.info.prompt.text;
      f.bos = "never";
      out.notes.push_back(id + "'s prompt was a conversation rendered with " + rec.info.prompt.chat_template +
                          ": the form holds the rendered text, tokenized as is");
    }
    bos_known = true;
  } else if (!rec.info.prompt.text.empty()) {
    f.prompt = rec.info.prompt.text;
  } else if (tokenizer && !ids.empty()) {
    f.prompt = tokenizer->decode(ids);
    out.notes.push_back(id + " stored its prompt as " + std::to_string(ids.size()) +
                        " token ids only: the prompt is their decoded text (it may not re-tokenize to the same ids)");
  } else {
    out.notes.push_back(id + " stored no prompt text (" + std::to_string(ids.size()) +
                        " token ids): the form's prompt kept");
  }
  // BOS: not recorded, but the stored ids tell whether one was prepended to the text's tokens.
  if (!bos_known && tokenizer && !rec.info.prompt.text.empty()) {
    const std::vector<int32_t> enc = tokenizer->encode(rec.info.prompt.text);
    if (ids == enc) {
      f.bos = "never", bos_known = true;
    } else if (ids.size() == enc.size() + 1 && std::equal(enc.begin(), enc.end(), ids.begin() + 1)) {
      f.bos = "always", bos_known = true;
    } else {
      out.notes.push_back("the prompt text tokenizes to " + std::to_string(enc.size()) + " ids today, not the " +
                          std::to_string(ids.size()) + " the run stored: a re-run will not be on the same prompt ids");
    }
  }
  if (!bos_known) out.notes.push_back("BOS mode not recorded: the form's \"" + base.bos + "\" kept");

  // Pipeline and budget.
  const std::string& spec = rec.info.pipeline.spec;
  f.pipeline_spec = spec == "full" ? "" : spec;
  if (!f.pipeline_spec.empty()) {
    f.budget_unit = std::string(budget_unit_name(rec.info.budget.unit));
    f.budget_value = rec.info.budget.value;
  }

  // Later turns (kvscope-cli run --turn): every turn's input is stored as token ids; the form takes
  // their text, decoded with the model's tokenizer. Turn 0 is the prompt, filled above.
  f.turns.clear();
  if (turns.size() > 1) {
    const std::size_t n_later = turns.size() - 1;
    if (!tokenizer) {
      out.notes.push_back(id + "'s " + std::to_string(n_later) + " later turn" + (n_later == 1 ? "" : "s") +
                          " (stored as token ids) could not be decoded: no tokenizer loads for its model; the form "
                          "has no later turns");
    } else {
      for (std::size_t t = 1; t < turns.size(); ++t) {
        const auto& turn_ids = turns[t].input_ids;
        f.turns.push_back(tokenizer->decode(turn_ids));
        if (tokenizer->encode(f.turns.back()) != turn_ids)
          out.notes.push_back("turn " + std::to_string(t + 1) + "'s decoded text tokenizes to other ids than the " +
                              std::to_string(turn_ids.size()) +
                              " the run stored: a re-run will not be on the same turn");
      }
    }
  }

  // Generation: the limit is not recorded; the tokens generated are at most it (per turn: the most
  // any turn generated).
  auto generated = static_cast<std::int64_t>(rec.outputs.tokens.size());
  for (const auto& t : turns) generated = std::max(generated, static_cast<std::int64_t>(t.output_ids.size()));
  if (generated > 0) {
    f.max_new_tokens = generated;
    if (generated != base.max_new_tokens)
      out.notes.push_back("max new tokens not recorded: set to the " + std::to_string(generated) +
                          " tokens the run generated (fewer than its limit if it stopped at an end token)");
  } else {
    out.notes.push_back("max new tokens not recorded and the run generated none: the form's " +
                        std::to_string(base.max_new_tokens) + " kept");
  }
  out.notes.push_back(std::string("sampling not recorded: the form's ") +
                      (base.greedy ? "greedy" : "temperature / top-p / seed") + " kept");
  f.allow_beyond_context = rec.row.summary.count("beyond_context_tokens") > 0;

  // Capture and reference, from what the run stored.
  f.capture = capture_level(rec);
  f.reference_full = has_reference(rec);
  if (f.capture != "off")
    out.notes.push_back("capture window not recorded: the form's " + std::to_string(base.capture_window) + " kept");

  // Where it goes: the run's database, under its name.
  f.db_path = db;
  f.name = rec.info.name;
  if (rec.row.status != sessions::RunStatus::kComplete || rec.row.incomplete)
    out.notes.insert(out.notes.begin(), id + " did not complete" +
                                            (rec.row.error.empty() ? std::string() : " (" + rec.row.error + ")") +
                                            ": what it recorded was filled in");
  return out;
}

bool open_in_run(AppState& s, const std::string& db, std::int64_t run, const PolicyCatalog* catalog) {
  const RunRef ref{db, run};
  sessions::RunRecord rec;
  bool found = false;
  if (s.a && s.a->ref == ref) rec = s.a->record, found = true;
  for (const auto& o : s.others)
    if (!found && o->ref == ref) rec = o->record, found = true;
  if (!found) {
    const int di = db_index(s, db);
    if (di < 0) {
      s.status = db + ": database not open";
      return false;
    }
    try {
      rec = s.dbs[static_cast<std::size_t>(di)].store->load_run(run);
    } catch (const std::exception& e) {
      s.status = e.what();
      return false;
    }
  }
  // The turns of a multi-turn run: read with the run's light part when it is open, else from the store.
  std::vector<sessions::Turn> turns;
  std::string turns_note;
  const RunData* open = s.a && s.a->ref == ref ? s.a.get() : nullptr;
  for (const auto& o : s.others)
    if (!open && o->ref == ref) open = o.get();
  if (open) {
    turns = open->turns;
    turns_note = open->turns_note;
  } else if (const int di = db_index(s, db); di >= 0) {
    try {
      turns = sessions::load_turns(*s.dbs[static_cast<std::size_t>(di)].store, run);
    } catch (const std::exception& e) {
      turns_note = e.what();
    }
  }
  std::string why;
  const Tokenizer* tok = rec.info.model.path.empty() ? nullptr : s.tokenizers.get(rec.info.model.path, &why);
  RunFill fill = fill_from_run(rec, db, s.run.form, tok, turns);
  if (!turns_note.empty())
    fill.notes.push_back("the run's turns could not be read (" + turns_note + "): the form has no later turns");
  RunState& st = s.run;
  st.form = std::move(fill.form);
  st.fill_notes = std::move(fill.notes);
  st.filled_from = "#" + std::to_string(run) + " of " + std::filesystem::path(db).filename().string();
  st.spec_error.clear();
  st.spec_text = st.form.pipeline_spec;
  if (catalog) {
    try {
      st.pipeline = from_spec(st.form.pipeline_spec, *catalog);
      st.spec_text = to_spec(st.pipeline, *catalog);
    } catch (const std::exception& e) {
      // The SPEC stays as text with what the catalogue could not read; Run is disabled until fixed.
      st.pipeline = {};
      st.spec_error = "run #" + std::to_string(run) + "'s pipeline: " + e.what();
    }
  }
  st.pipeline_initialised = true;
  s.view = View::kRun;
  s.select_view = true;
  s.status = "Run view filled from run " + st.filled_from;
  return true;
}

}  // namespace kvscope::gui
