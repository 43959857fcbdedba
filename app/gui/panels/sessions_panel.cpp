// Sessions: open one or more session databases, list their runs (model, prompt, pipeline, budget,
// key metrics, complete or not), filter and sort, open a run as A or add it to the comparison,
// and edit notes and bookmarks of run A.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "../run_from_record.h"
#include "../ui_util.h"
#include "budget_text.h"
#include "panels.h"

namespace kvscope::gui::panels {
namespace {

enum Col {
  kColId,
  kColName,
  kColStatus,
  kColModel,
  kColPrompt,
  kColPipeline,
  kColBudget,
  kColKl,
  kColTop1,
  kColPrefill,
  kColTps,
  kColBytes,
  kColCreated,
  kColDb,
  kNumCols
};

struct RowRef {
  int db;
  std::size_t row;
  double key = 0;  ///< numeric sort key of the sorted column (computed once per frame)
};

const OpenDb::Extra& extra_of(OpenDb& d, const sessions::RunRow& r) {
  auto it = d.extra.find(r.id);
  if (it != d.extra.end()) return it->second;
  OpenDb::Extra e;
  try {
    const auto rec = d.store->load_run(r.id);
    e.prompt = rec.info.prompt.text;
    e.chat_template = rec.info.prompt.chat_template;
    if (!e.chat_template.empty()) {  // a chat prompt: its last message reads better than the rendered text
      const auto messages = nlohmann::ordered_json::parse(rec.info.prompt.chat_messages, nullptr, false);
      if (messages.is_array() && !messages.empty() && messages.back().is_object() &&
          messages.back().contains("content") && messages.back()["content"].is_string())
        e.chat_preview = messages.back()["content"].get<std::string>();
      else
        e.chat_preview = e.prompt;
    }
    e.n_prompt = static_cast<std::int64_t>(rec.info.prompt.tokens.size());
    e.n_layer = rec.info.model.n_layer;
    e.n_head_kv = rec.info.model.n_head_kv;
    e.notes = static_cast<std::int64_t>(rec.notes.size());
    e.bookmarks = static_cast<std::int64_t>(rec.bookmarks.size());
  } catch (const std::exception& ex) {
    e.prompt = std::string("(") + ex.what() + ")";
  }
  return d.extra.emplace(r.id, std::move(e)).first->second;
}

double metric(const sessions::RunRow& r, const char* name) {
  auto it = r.summary.find(name);
  return it == r.summary.end() ? NAN : it->second;
}

/// The kept share of a listed run: its summary metrics; for a run that recorded none (failed,
/// running), its budget over the prompt length (which reads the run's record once).
kvscope::run::KeptShare kept_share_of(OpenDb& d, const sessions::RunRow& r) {
  const bool recorded = r.summary.count("n_prompt") && r.summary.count("kept_per_head_mean");
  return kvscope::run::kept_share(r, recorded ? -1 : extra_of(d, r).n_prompt);
}

std::string status_text(const sessions::RunRow& r) {
  if (r.incomplete) return "incomplete";
  return std::string(sessions::to_string(r.status));
}

bool contains_ci(const std::string& hay, const std::string& needle) {
  if (needle.empty()) return true;
  auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
  });
  return it != hay.end();
}

void notes_and_bookmarks(AppState& s) {
  SessionsState& st = s.sessions;
  ImGui::Separator();
  if (!s.a) {
    ImGui::TextDisabled("Open a run to see its notes and bookmarks.");
    return;
  }
  const int di = db_index(s, s.a->ref.db);
  if (di < 0) return;
  OpenDb& d = s.dbs[static_cast<std::size_t>(di)];
  if (st.notes_for != s.a->ref || st.notes_dirty) {
    try {
      st.notes = d.store->list_notes(s.a->ref.run);
      st.bookmarks = d.store->list_bookmarks(s.a->ref.run);
    } catch (const std::exception& e) {
      s.status = e.what();
    }
    st.notes_for = s.a->ref;
    st.notes_dirty = false;
  }
  auto write = [&](auto&& f) {
    try {
      f();
      st.notes_dirty = true;
      d.extra.erase(s.a->ref.run);
    } catch (const std::exception& e) {
      s.status = e.what();
    }
  };
  ImGui::Text("Run A: %s", ellipsize(s.a->title(), 110).c_str());
  if (!d.writable) ImGui::TextDisabled("(database opened read-only: notes and bookmarks cannot be changed)");
  ImGui::BeginDisabled(!d.writable);
  const float half = ImGui::GetContentRegionAvail().x * 0.5f - 8;
  ImGui::BeginChild("notes", {half, 0}, true);
  ImGui::TextUnformatted("Notes");
  for (const auto& n : st.notes) {
    ImGui::PushID(static_cast<int>(n.id));
    if (st.editing_note == n.id) {
      input_text_multiline("##edit", st.edit_text, {-1, 60});
      if (ImGui::SmallButton("save")) {
        write([&] { d.store->update_note(n.id, st.edit_text); });
        st.editing_note = -1;
      }
      ImGui::SameLine();
      if (ImGui::SmallButton("cancel")) st.editing_note = -1;
    } else {
      ImGui::TextWrapped("%s", n.text.c_str());
      ImGui::TextDisabled("%s", n.updated_at.c_str());
      ImGui::SameLine();
      if (ImGui::SmallButton("edit")) st.editing_note = n.id, st.edit_text = n.text;
      ImGui::SameLine();
      if (ImGui::SmallButton("delete")) write([&] { d.store->delete_note(n.id); });
    }
    ImGui::PopID();
  }
  input_text_multiline("##new_note", st.new_note, {-1, 48});
  if (ImGui::Button("Add note") && !st.new_note.empty()) {
    write([&] { d.store->add_note(s.a->ref.run, st.new_note); });
    st.new_note.clear();
  }
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("bookmarks", {0, 0}, true);
  ImGui::TextUnformatted("Bookmarks");
  for (const auto& b : st.bookmarks) {
    ImGui::PushID(static_cast<int>(b.id));
    if (ImGui::SmallButton("go")) {
      if (b.layer >= 0) s.sel.layer = b.layer;
      if (b.head >= 0) s.sel.head = b.head;
      s.sel.token = b.token;
      s.tokens.scroll_to = b.token;
    }
    ImGui::SameLine();
    if (ImGui::SmallButton("delete")) write([&] { d.store->delete_bookmark(b.id); });
    ImGui::SameLine();
    ImGui::Text("%s   L%lld H%lld%s", b.label.empty() ? "(no label)" : b.label.c_str(), static_cast<long long>(b.layer),
                static_cast<long long>(b.head), b.token >= 0 ? (" token " + std::to_string(b.token)).c_str() : "");
    ImGui::PopID();
  }
  ImGui::SetNextItemWidth(-170);
  input_text_hint("##bm_label", "label", st.bookmark_label);
  ImGui::SameLine();
  if (ImGui::Button("Bookmark selection")) {
    sessions::Bookmark b;
    b.run_id = s.a->ref.run;
    b.label = st.bookmark_label;
    b.layer = s.sel.layer;
    b.head = s.sel.head;
    b.token = s.sel.token;
    write([&] { d.store->add_bookmark(b); });
    st.bookmark_label.clear();
  }
  ImGui::TextDisabled("current: layer %lld, KV head %lld, %s", static_cast<long long>(s.sel.layer),
                      static_cast<long long>(s.sel.head),
                      s.sel.token >= 0 ? ("token " + std::to_string(s.sel.token)).c_str() : "no token selected");
  ImGui::EndChild();
  ImGui::EndDisabled();
}

}  // namespace

void sessions(AppState& s, Ui& ui) {
  SessionsState& st = s.sessions;
  // Open.
  ImGui::SetNextItemWidth(420);
  const bool enter =
      input_text_hint("##open", "path/to/sessions.db", st.open_path, ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SameLine();
  if ((ImGui::Button("Open database") || enter) && !st.open_path.empty()) {
    const int di = open_database(s, st.open_path);
    if (di >= 0 && !s.a) {
      const auto id = newest_run(s, di);
      if (id >= 0) open_run(s, di, id, false);
    }
  }
  ImGui::SameLine();
  if (ImGui::Button("Refresh")) refresh_databases(s);
  for (std::size_t i = 0; i < s.dbs.size(); ++i) {
    ImGui::SameLine();
    ImGui::PushID(static_cast<int>(i));
    ImGui::TextDisabled(" | %s (%zu runs)%s", std::filesystem::path(s.dbs[i].path).filename().string().c_str(),
                        s.dbs[i].rows.size(), s.dbs[i].writable ? "" : " read-only");
    item_tooltip(s.dbs[i].path);
    ImGui::PopID();
  }
  ImGui::SetNextItemWidth(300);
  input_text_hint("##filter", "filter: name, model, pipeline, prompt", st.filter);
  ImGui::SameLine();
  ImGui::Checkbox("complete only", &st.complete_only);
  ImGui::SameLine();
  ImGui::TextDisabled("   click: open as A   ctrl+click: compare   right-click: compare, open in Run, delete");

  // Rows of every database, filtered.
  std::vector<RowRef> rows;
  for (std::size_t di = 0; di < s.dbs.size(); ++di)
    for (std::size_t ri = 0; ri < s.dbs[di].rows.size(); ++ri) {
      const auto& r = s.dbs[di].rows[ri];
      if (st.complete_only && r.status != sessions::RunStatus::kComplete) continue;
      if (!st.filter.empty()) {
        auto it = s.dbs[di].extra.find(r.id);
        const std::string prompt = it == s.dbs[di].extra.end() ? "" : it->second.prompt;
        if (!contains_ci(r.name, st.filter) && !contains_ci(r.model_path, st.filter) &&
            !contains_ci(r.pipeline_spec, st.filter) && !contains_ci(prompt, st.filter) &&
            !contains_ci(std::to_string(r.id), st.filter))
          continue;
      }
      rows.push_back({static_cast<int>(di), ri});
    }

  const bool multi = s.dbs.size() > 1;
  // Row actions run after the table (they may reload the run lists the table iterates).
  enum class Action { kNone, kOpenA, kCompare, kUncompare, kOpenInRun, kDelete };
  struct Pending {
    Action action = Action::kNone;
    int db = -1;
    std::int64_t run = -1;
  } pending;
  const ImGuiTableFlags flags = ImGuiTableFlags_Sortable | ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders |
                                ImGuiTableFlags_Resizable | ImGuiTableFlags_ScrollY | ImGuiTableFlags_ScrollX |
                                ImGuiTableFlags_Hideable | ImGuiTableFlags_SizingFixedFit;
  const float notes_h = s.a ? 210.0f : 40.0f;
  if (ImGui::BeginTable("runs", kNumCols, flags, {0, std::max(120.0f, ImGui::GetContentRegionAvail().y - notes_h)})) {
    ImGui::TableSetupScrollFreeze(2, 1);
    ImGui::TableSetupColumn("#", ImGuiTableColumnFlags_DefaultSort, 0, kColId);
    ImGui::TableSetupColumn("name", 0, 0, kColName);
    ImGui::TableSetupColumn("status", 0, 0, kColStatus);
    ImGui::TableSetupColumn("model", 0, 0, kColModel);
    ImGui::TableSetupColumn("prompt", ImGuiTableColumnFlags_NoSort, 220, kColPrompt);
    ImGui::TableSetupColumn("pipeline", 0, 230, kColPipeline);
    ImGui::TableSetupColumn("budget", 0, 0, kColBudget);
    ImGui::TableSetupColumn("mean KL", 0, 0, kColKl);
    ImGui::TableSetupColumn("top-1", 0, 0, kColTop1);
    ImGui::TableSetupColumn("prefill ms", 0, 0, kColPrefill);
    ImGui::TableSetupColumn("tok/s", 0, 0, kColTps);
    ImGui::TableSetupColumn("KV bytes", 0, 0, kColBytes);
    ImGui::TableSetupColumn("created", 0, 0, kColCreated);
    ImGui::TableSetupColumn("database", multi ? 0 : ImGuiTableColumnFlags_DefaultHide, 0, kColDb);
    ImGui::TableHeadersRow();
    if (ImGuiTableSortSpecs* specs = ImGui::TableGetSortSpecs(); specs && specs->SpecsCount > 0) {
      st.sort_column = static_cast<int>(specs->Specs[0].ColumnUserID);
      st.sort_descending = specs->Specs[0].SortDirection == ImGuiSortDirection_Descending;
    }
    auto row_of = [&](const RowRef& r) -> const sessions::RunRow& {
      return s.dbs[static_cast<std::size_t>(r.db)].rows[r.row];
    };
    auto key_num = [&](const RowRef& r) -> double {
      const auto& x = row_of(r);
      switch (st.sort_column) {
        case kColKl:
          return metric(x, "mean_kl");
        case kColTop1:
          return metric(x, "top1_agreement");
        case kColPrefill:
          return metric(x, "prefill_ms");
        case kColTps:
          return metric(x, "decode_tokens_per_s");
        case kColBytes:
          return metric(x, "kv_bytes_live");
        case kColBudget:  // the kept share, whatever unit the budget was given in
          return kvscope::run::kept_sort_key(kept_share_of(s.dbs[static_cast<std::size_t>(r.db)], x));
        default:
          return static_cast<double>(x.id);
      }
    };
    auto key_text = [&](const RowRef& r) -> std::string {
      const auto& x = row_of(r);
      switch (st.sort_column) {
        case kColName:
          return x.name;
        case kColStatus:
          return status_text(x);
        case kColModel:
          return x.model_path;
        case kColPipeline:
          return x.pipeline_spec;
        case kColCreated:
          return x.created_at;
        case kColDb:
          return s.dbs[static_cast<std::size_t>(r.db)].path;
        default:
          return {};
      }
    };
    const bool text_sort = st.sort_column == kColName || st.sort_column == kColStatus || st.sort_column == kColModel ||
                           st.sort_column == kColPipeline || st.sort_column == kColCreated || st.sort_column == kColDb;
    if (!text_sort)
      for (RowRef& r : rows) r.key = key_num(r);
    std::stable_sort(rows.begin(), rows.end(), [&](const RowRef& x, const RowRef& y) {
      if (text_sort) {
        const auto a = key_text(x), b = key_text(y);
        return st.sort_descending ? b < a : a < b;
      }
      const double a = x.key, b = y.key;
      if (std::isnan(a) != std::isnan(b)) return std::isnan(b);  // NaN last
      return st.sort_descending ? b < a : a < b;
    });

    ImGuiListClipper clipper;
    clipper.Begin(static_cast<int>(rows.size()));

    while (clipper.Step()) {
      for (int k = clipper.DisplayStart; k < clipper.DisplayEnd; ++k) {
        const RowRef rr = rows[static_cast<std::size_t>(k)];
        OpenDb& d = s.dbs[static_cast<std::size_t>(rr.db)];
        const auto& r = d.rows[rr.row];
        const auto& ex = extra_of(d, r);
        const RunRef ref{d.path, r.id};
        const bool is_a = s.a && s.a->ref == ref;
        const bool is_cmp = std::any_of(s.others.begin(), s.others.end(), [&](const auto& o) { return o->ref == ref; });
        ImGui::TableNextRow();
        ImGui::PushID(k);
        ImGui::TableSetColumnIndex(kColId);
        const std::string label = std::string(is_a ? "A " : is_cmp ? "B " : "  ") + std::to_string(r.id);
        if (ImGui::Selectable(label.c_str(), is_a || is_cmp,
                              ImGuiSelectableFlags_SpanAllColumns | ImGuiSelectableFlags_AllowItemOverlap))
          pending = {ImGui::GetIO().KeyCtrl ? Action::kCompare : Action::kOpenA, rr.db, r.id};
        if (ImGui::BeginPopupContextItem("row")) {
          if (ImGui::MenuItem("Open as A")) pending = {Action::kOpenA, rr.db, r.id};
          if (ImGui::MenuItem("Add to compare", nullptr, false, !is_a && !is_cmp))
            pending = {Action::kCompare, rr.db, r.id};
          if (ImGui::MenuItem("Remove from compare", nullptr, false, is_cmp))
            pending = {Action::kUncompare, rr.db, r.id};
          ImGui::Separator();
          if (ImGui::MenuItem("Open in Run"))  // its form in the Run view: re-run it, or change one field
            pending = {Action::kOpenInRun, rr.db, r.id};
          item_tooltip("Fill the Run view from this run (model, prompt, pipeline, budget, capture, ...)");
          ImGui::Separator();
          if (ImGui::MenuItem("Delete run", nullptr, false, d.writable && r.status != sessions::RunStatus::kComplete))
            pending = {Action::kDelete, rr.db, r.id};
          ImGui::EndPopup();
        }
        ImGui::TableSetColumnIndex(kColName);
        ImGui::TextUnformatted(r.name.c_str());
        if (ex.notes || ex.bookmarks) {
          ImGui::SameLine();
          ImGui::TextDisabled("[%lldn %lldb]", static_cast<long long>(ex.notes), static_cast<long long>(ex.bookmarks));
        }
        ImGui::TableSetColumnIndex(kColStatus);
        const std::string stt = status_text(r);
        if (r.status == sessions::RunStatus::kComplete)
          ImGui::TextUnformatted(stt.c_str());
        else
          ImGui::TextColored({0.8f, 0.35f, 0.0f, 1}, "%s", stt.c_str());
        if (!r.error.empty()) item_tooltip(r.error);
        ImGui::TableSetColumnIndex(kColModel);
        ImGui::TextUnformatted(std::filesystem::path(r.model_path).filename().string().c_str());
        item_tooltip(r.model_path + "\n" + std::to_string(ex.n_layer) + " layers, " + std::to_string(ex.n_head_kv) +
                     " KV heads");
        ImGui::TableSetColumnIndex(kColPrompt);
        const bool chat = !ex.chat_template.empty();
        std::string p = chat ? ex.chat_preview : ex.prompt;
        std::replace(p.begin(), p.end(), '\n', ' ');
        ImGui::Text("%lld tok%s: %s", static_cast<long long>(ex.n_prompt), chat ? " chat" : "",
                    ellipsize(p, chat ? 25 : 30).c_str());
        item_tooltip(chat ? "chat prompt, rendered with " + ex.chat_template + ":\n" + ellipsize(ex.prompt, 600)
                          : ellipsize(ex.prompt, 600));
        ImGui::TableSetColumnIndex(kColPipeline);
        ImGui::TextUnformatted(ellipsize(r.pipeline_spec, 36).c_str());
        item_tooltip(r.pipeline_spec);
        ImGui::TableSetColumnIndex(kColBudget);
        const kvscope::run::KeptShare kept = kept_share_of(d, r);
        ImGui::TextUnformatted(kvscope::run::kept_text(kept).c_str());
        item_tooltip(kvscope::run::budget_explanation(kept));
        if (const std::string given = kvscope::run::given_text(kept); !given.empty()) {
          ImGui::SameLine();
          ImGui::TextDisabled("%s", given.c_str());
          item_tooltip(kvscope::run::budget_explanation(kept));
        }
        ImGui::TableSetColumnIndex(kColKl);
        ImGui::TextUnformatted(format_num(metric(r, "mean_kl"), "%.4g").c_str());
        ImGui::TableSetColumnIndex(kColTop1);
        ImGui::TextUnformatted(format_num(metric(r, "top1_agreement"), "%.3f").c_str());
        ImGui::TableSetColumnIndex(kColPrefill);
        ImGui::TextUnformatted(format_num(metric(r, "prefill_ms"), "%.1f").c_str());
        ImGui::TableSetColumnIndex(kColTps);
        ImGui::TextUnformatted(format_num(metric(r, "decode_tokens_per_s"), "%.1f").c_str());
        ImGui::TableSetColumnIndex(kColBytes);
        ImGui::TextUnformatted(format_bytes(metric(r, "kv_bytes_live")).c_str());
        ImGui::TableSetColumnIndex(kColCreated);
        ImGui::TextUnformatted(r.created_at.substr(0, 19).c_str());
        ImGui::TableSetColumnIndex(kColDb);
        ImGui::TextUnformatted(std::filesystem::path(d.path).filename().string().c_str());
        ImGui::PopID();
      }
    }
    ImGui::EndTable();
  }
  if (pending.action != Action::kNone) {
    OpenDb& d = s.dbs[static_cast<std::size_t>(pending.db)];
    const RunRef ref{d.path, pending.run};
    switch (pending.action) {
      case Action::kOpenA:
        open_run(s, pending.db, pending.run, false);
        break;
      case Action::kCompare:
        open_run(s, pending.db, pending.run, true);
        break;
      case Action::kUncompare:
        std::erase_if(s.others, [&](const auto& o) { return o->ref == ref; });
        break;
      case Action::kOpenInRun:
        open_in_run(s, d.path, pending.run, ui.catalog);
        break;
      case Action::kDelete:
        try {
          d.store->delete_run(pending.run);
          if (s.a && s.a->ref == ref) s.a.reset();
          std::erase_if(s.others, [&](const auto& o) { return o->ref == ref; });
          refresh_databases(s);
        } catch (const std::exception& e) {
          s.status = e.what();
        }
        break;
      case Action::kNone:
        break;
    }
  }
  if (s.dbs.empty()) ImGui::TextDisabled("No database open. kvscope --open FILE.db, or type a path above.");
  notes_and_bookmarks(s);
}

}  // namespace kvscope::gui::panels
