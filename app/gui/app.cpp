// The main window: menu, context bar (run A, compare runs, layer / head / token), one tab per view,
// status bar; and the actions on AppState (open databases and runs, view state).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "ab_mismatch.h"
#include "app_state.h"
#include "budget_text.h"
#include "identity_elide.h"
#include "panels/panels.h"
#include "ui_util.h"

namespace kvscope::gui {
namespace {

std::string canonical_path(const std::string& p) {
  std::error_code ec;
  auto c = std::filesystem::weakly_canonical(p, ec);
  return ec ? p : c.string();
}

void poll_worker(AppState& s, Ui& ui) {
  if (!ui.worker) return;
  RunState& st = s.run;
  st.running = ui.worker->busy();
  for (const RunUpdate& u : ui.worker->poll()) {
    switch (u.kind) {
      case RunUpdate::Kind::kStatus:
        st.log.push_back(u.text);
        break;
      case RunUpdate::Kind::kStarted:
        st.log.push_back("run #" + std::to_string(u.run_id) + " started; decoding");
        break;
      case RunUpdate::Kind::kToken:
        st.output += u.text;
        st.tokens = u.tokens;
        break;
      case RunUpdate::Kind::kProgress:
        st.live = u.live;
        if (u.live)
          s.status = "decoding: step " + std::to_string(u.live->decode_steps) + ", " +
                     format_num(u.live->decode_tokens_per_s, "%.1f") + " tok/s" +
                     (u.live->decode_graph ? " (CUDA graph)" : "") + ", KV cache " +
                     format_bytes(static_cast<double>(u.live->cache_bytes_live));
        break;
      case RunUpdate::Kind::kFinished: {
        st.log.push_back(u.text);
        st.last_run = u.run_id;
        st.last_db = u.db;
        s.status = u.text;
        const int di = open_database(s, u.db);
        if (di >= 0) open_run(s, di, u.run_id, false);
        break;
      }
      case RunUpdate::Kind::kFailed:
      case RunUpdate::Kind::kCancelled:
        st.log.push_back((u.kind == RunUpdate::Kind::kFailed ? "failed: " : "") + u.text);
        s.status = u.text;
        if (u.run_id >= 0 && db_index(s, u.db) >= 0) refresh_databases(s);
        break;
    }
  }
}

/// Help: the keys and clicks the app handles (keyboard() below, the panels' Enter fields and clicks).
void draw_help_menu() {
  if (!ImGui::BeginMenu("Help")) return;
  auto row = [](const char* keys, const char* what) {
    ImGui::TextUnformatted(keys);
    ImGui::SameLine(190);
    ImGui::TextDisabled("%s", what);
  };
  ImGui::TextUnformatted("Keyboard (views with a figure, no text field focused)");
  ImGui::Separator();
  row("Left / Right arrow", "previous / next KV head of the selection");
  row("Up / Down arrow", "previous / next layer of the selection");
  ImGui::Spacing();
  ImGui::TextUnformatted("In text fields");
  ImGui::Separator();
  row("Enter (Sessions path)", "open the database");
  row("Enter (Run: SPEC)", "apply the pipeline SPEC to the editor");
  row("Enter (Tokens: position)", "go to and select that prompt position");
  row("token (top bar)", "type a position to select it; empty = no token");
  ImGui::Spacing();
  ImGui::TextUnformatted("Mouse");
  ImGui::Separator();
  row("click (Sessions row)", "open the run as A");
  row("Ctrl+click (Sessions row)", "add the run to compare (B)");
  row("right-click (Sessions row)", "compare, open in Run (re-run), delete");
  row("click (a layer x head map)", "select that layer and KV head");
  row("click (a token)", "select that prompt position");
  row("hover", "values of the cell, token or step");
  ImGui::EndMenu();
}

void draw_menu(AppState& s) {
  if (!ImGui::BeginMenuBar()) return;
  if (ImGui::BeginMenu("File")) {
    if (ImGui::MenuItem("Open database\xe2\x80\xa6")) s.view = View::kSessions, s.select_view = true;
    if (ImGui::MenuItem("Refresh run lists")) refresh_databases(s);
    ImGui::Separator();
    if (ImGui::MenuItem("Export\xe2\x80\xa6", nullptr, false, s.a != nullptr)) s.exporting.open = true;
    if (ImGui::MenuItem("Save view state", nullptr, false, s.a != nullptr)) save_view_state(s);
    ImGui::Separator();
    if (ImGui::MenuItem("Quit")) s.quit_requested = true;
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("View")) {
    for (const ViewEntry& e : view_table())
      if (ImGui::MenuItem(e.title, nullptr, s.view == e.view())) s.view = e.view(), s.select_view = true;
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Compare")) {
    if (s.others.empty()) ImGui::TextDisabled("no compare runs (Sessions: right-click a run)");
    for (std::size_t i = 0; i < s.others.size(); ++i) {
      ImGui::PushID(static_cast<int>(i));
      if (ImGui::MenuItem(("remove " + ellipsize(s.others[i]->title(), 60)).c_str())) {
        s.others.erase(s.others.begin() + static_cast<std::ptrdiff_t>(i));
        ImGui::PopID();
        break;
      }
      ImGui::PopID();
    }
    if (!s.others.empty() && ImGui::MenuItem("Swap A and B"))
      std::swap(
          s.a,
          s.others[static_cast<std::size_t>(std::clamp(s.compare.b_index, 0, static_cast<int>(s.others.size()) - 1))]);
    ImGui::EndMenu();
  }
  draw_help_menu();
  ImGui::EndMenuBar();
}

void draw_context_bar(AppState& s) {
  if (!s.a) {
    ImGui::TextDisabled("No run open");
    return;
  }
  const RunData& a = *s.a;
  ImGui::AlignTextToFramePadding();
  ImGui::TextColored({0.0f, 0.35f, 0.6f, 1}, "A");
  ImGui::SameLine();
  // The runs' identities (name, pipeline, kept share) elided together: what they share is cut, never
  // where they differ (pipelines that differ only at the end stay apart), then each capped to its
  // share of the bar, so the "differs" marks and the selection controls stay in view; full text on hover.
  auto identity = [](const RunData& r) {
    const std::string spec = r.record.row.pipeline_spec;
    return (r.record.row.name.empty() ? "" : " " + r.record.row.name + " \xc2\xb7") + " " +
           (spec.empty() || spec == "full" ? std::string("full cache")
                                           : spec + " \xc2\xb7 " + kvscope::run::kept_text(r.kept_share()));
  };
  auto with_id = [](const RunData& r, const std::string& id) {
    return "#" + std::to_string(r.ref.run) + (id.starts_with(" ") ? "" : " ") + id;
  };
  std::vector<std::string> ids{identity(a)};
  std::vector<AbMismatch> mismatch;
  for (const auto& o : s.others) {
    ids.push_back(identity(*o));
    mismatch.push_back(ab_mismatch(a.record, o->record));
  }
  const float controls_w = 600;
  const float char_w = ImGui::CalcTextSize("abcdefghijklmnopqrstuvwxyz0123456789").x / 36.0f;
  float room = ImGui::GetWindowContentRegionMax().x - controls_w - ImGui::GetCursorPosX() - 16;
  for (const auto& m : mismatch) room -= ImGui::CalcTextSize("  vs  ").x + (m.any() ? 120.0f : 0.0f);
  const auto width = static_cast<std::size_t>(std::max(16.0f, room / static_cast<float>(ids.size()) / char_w));
  std::vector<std::string> shown = figures::elide_identities(ids, static_cast<int>(width));
  for (auto& x : shown) x = ellipsize(x, width);
  ImGui::TextUnformatted(with_id(a, shown[0]).c_str());
  const std::string& chat = a.record.info.prompt.chat_template;
  item_tooltip(a.title() + "\n" + a.caption() + "\n" +
               (chat.empty() ? "" : "chat prompt, rendered with " + chat + ":\n") +
               ellipsize(a.record.info.prompt.text, 400));
  for (std::size_t i = 0; i < s.others.size(); ++i) {
    const RunData& o = *s.others[i];
    ImGui::SameLine();
    ImGui::TextColored({0.75f, 0.45f, 0.0f, 1}, "  vs");
    // B on another prompt or model than A (also after a new run became A): said here, in every view.
    if (const AbMismatch& m = mismatch[i]; m.any()) {
      std::string what;
      for (const auto& w : m.what) what += (what.empty() ? "" : ", ") + w;
      ImGui::SameLine();
      ImGui::TextColored({0.8f, 0.3f, 0.0f, 1}, "\xe2\x89\xa0 %s", what.c_str());
      item_tooltip(m.line);
    }
    ImGui::SameLine();
    ImGui::TextUnformatted(with_id(o, shown[i + 1]).c_str());
    item_tooltip(o.title() + "\n" + o.caption());
  }
  ImGui::SameLine();
  const float right = ImGui::GetWindowContentRegionMax().x;
  if (ImGui::GetCursorPosX() < right - controls_w) ImGui::SetCursorPosX(right - controls_w);
  ImS64 l = s.sel.layer, h = s.sel.head;
  const ImS64 one = 1;
  ImGui::TextUnformatted("layer");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(120);
  if (ImGui::InputScalar("##layer", ImGuiDataType_S64, &l, &one, nullptr, "%lld")) s.sel.layer = l;
  ImGui::SameLine();
  ImGui::TextDisabled("/%lld", static_cast<long long>(a.n_layer));
  ImGui::SameLine();
  ImGui::TextUnformatted("  KV head");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(120);
  if (ImGui::InputScalar("##head", ImGuiDataType_S64, &h, &one, nullptr, "%lld")) s.sel.head = h;
  ImGui::SameLine();
  ImGui::TextDisabled("/%lld", static_cast<long long>(a.n_head_kv));
  clamp_selection(s);
  ImGui::SameLine();
  ImGui::TextUnformatted("token");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(80);
  // Empty (hint "none") while no token is selected, never "-1"; clearing the field deselects.
  std::string t = s.sel.token >= 0 ? std::to_string(s.sel.token) : "";
  if (input_text_hint("##token", "none", t, ImGuiInputTextFlags_CharsDecimal)) {
    std::int64_t v = -1;
    try {
      if (!t.empty()) v = std::stoll(t);
    } catch (const std::exception&) {
      v = s.sel.token;  // not a number (a lone sign): keep the selection
    }
    s.sel.token = std::clamp<std::int64_t>(v, -1, a.n_tok - 1);
    s.tokens.scroll_to = s.sel.token;
  }
  item_tooltip(s.sel.token >= 0 ? "selected prompt position (clear the field to deselect)"
                                : "no token selected: type a prompt position, or click a token in the token views");
}

}  // namespace

// ---- actions --------------------------------------------------------------------------------------

int db_index(const AppState& s, const std::string& path) {
  for (std::size_t i = 0; i < s.dbs.size(); ++i)
    if (s.dbs[i].path == path) return static_cast<int>(i);
  const std::string c = canonical_path(path);
  for (std::size_t i = 0; i < s.dbs.size(); ++i)
    if (canonical_path(s.dbs[i].path) == c) return static_cast<int>(i);
  return -1;
}

int open_database(AppState& s, const std::string& path) {
  if (int i = db_index(s, path); i >= 0) {
    OpenDb& d = s.dbs[static_cast<std::size_t>(i)];
    try {
      d.rows = d.store->list_runs();
      d.extra.clear();
    } catch (const std::exception& e) {
      s.status = e.what();
    }
    return i;
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    s.status = path + ": no such database file";
    return -1;
  }
  OpenDb d;
  d.path = path;
  try {
    // kView: an existing database only (a 0-byte or schema-less file is refused, never
    // initialised); writable for notes and bookmarks where possible, else read-only.
    d.store = std::make_unique<sessions::SessionStore>(sessions::SessionStore::open(path, sessions::OpenMode::kView));
    d.writable = d.store->writable();
  } catch (const std::exception& e) {
    s.status = e.what();
    return -1;
  }
  try {
    d.rows = d.store->list_runs();
  } catch (const std::exception& e) {
    s.status = e.what();
    return -1;
  }
  s.status = "opened " + path + " (" + std::to_string(d.rows.size()) + " runs)";
  if (!d.writable) s.status += ", read-only: " + d.store->read_only_reason();
  s.dbs.push_back(std::move(d));
  return static_cast<int>(s.dbs.size()) - 1;
}

void refresh_databases(AppState& s) {
  for (auto& d : s.dbs) {
    try {
      d.rows = d.store->list_runs();
      d.extra.clear();
    } catch (const std::exception& e) {
      s.status = e.what();
    }
  }
  s.sessions.notes_dirty = true;
}

bool open_run(AppState& s, int db, std::int64_t run, bool compare) {
  if (db < 0 || db >= static_cast<int>(s.dbs.size())) return false;
  OpenDb& d = s.dbs[static_cast<std::size_t>(db)];
  const RunRef ref{d.path, run};
  if (compare && s.a && s.a->ref == ref) return true;
  for (const auto& o : s.others)
    if (o->ref == ref && compare) return true;
  std::shared_ptr<const RunData> data;
  for (const auto& o : s.others)
    if (o->ref == ref) data = o;
  try {
    if (!data) {
      // The light part only (record, summary, kept-set sizes, token texts); views ask the loader
      // for the per-layer parts they draw.
      const sessions::RunRow* row = nullptr;
      for (const auto& r : d.rows)
        if (r.id == run) row = &r;
      std::string why = "no tokenizer loaded";
      figures::TokenText text;
      if (row) text = s.tokenizers.token_text(row->model_path, d.path, &why);
      data = figures::load_run_data(*d.store, run, text, why);
    }
  } catch (const std::exception& e) {
    s.status = e.what();
    return false;
  }
  if (compare && s.a) {
    s.others.push_back(data);
    s.compare.b_index = static_cast<int>(s.others.size()) - 1;
    s.status = "comparing with run #" + std::to_string(run);
  } else {
    std::erase_if(s.others, [&](const auto& o) { return o->ref == ref; });
    s.a = data;
    clamp_selection(s);
    char buf[160];
    std::snprintf(buf, sizeof buf, "opened run #%lld (%lld tokens, %lld layers x %lld KV heads) in %.0f ms",
                  static_cast<long long>(run), static_cast<long long>(data->n_tok),
                  static_cast<long long>(data->n_layer), static_cast<long long>(data->n_head_kv), data->load_ms);
    s.status = buf;
    // B stays when A changes (a new run, another row): say when it is no longer on A's prompt or model.
    if (const auto b = s.b_run())
      if (const AbMismatch m = ab_mismatch(data->record, b->record); m.any()) s.status += "; " + m.line;
  }
  s.sessions.notes_dirty = true;
  return true;
}

std::int64_t newest_run(const AppState& s, int db) {
  if (db < 0 || db >= static_cast<int>(s.dbs.size())) return -1;
  std::int64_t best = -1;
  for (const auto& r : s.dbs[static_cast<std::size_t>(db)].rows) best = std::max(best, r.id);
  return best;
}

void clamp_selection(AppState& s) {
  if (!s.a) return;
  s.sel.layer = std::clamp<std::int64_t>(s.sel.layer, 0, std::max<std::int64_t>(0, s.a->n_layer - 1));
  s.sel.head = std::clamp<std::int64_t>(s.sel.head, 0, std::max<std::int64_t>(0, s.a->n_head_kv - 1));
  if (s.sel.token >= s.a->n_tok) s.sel.token = -1;
}

void save_view_state(AppState& s) {
  if (!s.a) return;
  const int di = db_index(s, s.a->ref.db);
  if (di < 0 || !s.dbs[static_cast<std::size_t>(di)].writable) return;
  std::ostringstream os;
  os << "view=" << view_name(s.view) << ";run=" << s.a->ref.run << ";layer=" << s.sel.layer << ";head=" << s.sel.head
     << ";token=" << s.sel.token << ";heads_metric=" << s.heads.opt.metric << ";positions=" << s.sel.pos_lo << ":"
     << s.sel.pos_hi << ";tokens_coloring=" << static_cast<int>(s.tokens.opt.coloring);
  try {
    s.dbs[static_cast<std::size_t>(di)].store->set_view_state("gui.last", os.str());
    s.status = "saved view state";
  } catch (const std::exception& e) {
    s.status = e.what();
  }
}

void restore_view_state(AppState& s, int db) {
  if (db < 0 || db >= static_cast<int>(s.dbs.size())) return;
  std::optional<std::string> v;
  try {
    v = s.dbs[static_cast<std::size_t>(db)].store->get_view_state("gui.last");
  } catch (const std::exception&) {
    return;
  }
  if (!v) return;
  std::map<std::string, std::string> kv;
  std::stringstream ss(*v);
  std::string item;
  while (std::getline(ss, item, ';'))
    if (auto eq = item.find('='); eq != std::string::npos) kv[item.substr(0, eq)] = item.substr(eq + 1);
  auto num = [&](const char* k, std::int64_t d) {
    try {
      return kv.count(k) ? static_cast<std::int64_t>(std::stoll(kv[k])) : d;
    } catch (const std::exception&) {
      return d;
    }
  };
  const auto run = num("run", -1);
  if (run >= 0 && (!s.a || s.a->ref.run != run)) open_run(s, db, run, false);
  s.sel = {num("layer", 0), num("head", 0), num("token", -1)};
  if (const auto c = kv["positions"].find(':'); c != std::string::npos) try {
      s.sel.pos_lo = std::max<std::int64_t>(0, std::stoll(kv["positions"].substr(0, c)));
      s.sel.pos_hi = std::stoll(kv["positions"].substr(c + 1));
    } catch (const std::exception&) {
    }
  s.tokens.opt.coloring = static_cast<TokenColoring>(
      std::clamp<std::int64_t>(num("tokens_coloring", 0), 0, static_cast<int>(TokenColoring::kScore)));
  s.heads.opt.metric = static_cast<int>(std::clamp<std::int64_t>(num("heads_metric", -1), -1, 8));
  if (auto view = parse_view(kv["view"])) s.view = *view, s.select_view = true;
  clamp_selection(s);
}

std::int64_t same_prompt_run(AppState& s, int db) {
  if (!s.a || db < 0 || db >= static_cast<int>(s.dbs.size())) return -1;
  OpenDb& d = s.dbs[static_cast<std::size_t>(db)];
  std::vector<const sessions::RunRow*> rows;
  for (const auto& r : d.rows)
    if (r.status == sessions::RunStatus::kComplete && !(RunRef{d.path, r.id} == s.a->ref)) rows.push_back(&r);
  std::sort(rows.begin(), rows.end(), [](const auto* x, const auto* y) { return x->id > y->id; });
  for (const auto* r : rows) {
    const bool taken = std::any_of(s.others.begin(), s.others.end(), [&](const auto& o) {
      return o->ref == RunRef{d.path, r->id};
    });
    if (taken) continue;
    try {
      if (d.store->load_run(r->id).info.prompt.tokens == s.a->record.info.prompt.tokens) return r->id;
    } catch (const std::exception&) {
    }
  }
  return -1;
}

bool apply_options(AppState& s, const GuiOptions& o) {
  bool ok = true;
  for (const auto& path : o.open)
    if (open_database(s, path) < 0) ok = false;
  if (!s.dbs.empty()) {
    if (!o.runs.empty()) {
      for (std::size_t i = 0; i < o.runs.size(); ++i)
        if (!open_run(s, 0, o.runs[i], i > 0)) ok = false;
    } else if (!s.headless && !o.view) {
      restore_view_state(s, 0);
    }
    if (!s.a) {
      const auto id = newest_run(s, 0);
      if (id >= 0 && !open_run(s, 0, id, false)) ok = false;
    }
  }
  if (o.view) {
    s.view = *o.view;
    s.select_view = true;
  } else if (s.a && s.view == View::kSessions && !s.headless) {
    s.view = View::kHeads;
    s.select_view = true;
  }
  if (s.view == View::kCompare && s.a && s.others.empty() && o.runs.size() < 2)
    if (const auto b = same_prompt_run(s, db_index(s, s.a->ref.db)); b >= 0)
      open_run(s, db_index(s, s.a->ref.db), b, true);
  // A compare opened from the command line starts the per-run views on the A - B side.
  if (o.runs.size() >= 2 && !s.others.empty())
    s.tokens.opt.side = s.attention.opt.side = s.keys.opt.side = s.channels.opt.side = s.timeline.opt.side =
        Side::kDiff;
  if (o.layer >= 0) s.sel.layer = o.layer;
  if (o.head >= 0) s.sel.head = o.head;
  if (o.token >= 0) s.sel.token = s.tokens.scroll_to = o.token;
  if (o.pos_hi >= 0) s.sel.pos_lo = o.pos_lo, s.sel.pos_hi = o.pos_hi;
  if (o.tokens_coloring >= 0) s.tokens.opt.coloring = static_cast<TokenColoring>(o.tokens_coloring);
  clamp_selection(s);
  if (o.turn > 0 && s.a) {
    if (o.turn <= static_cast<int>(s.a->turns.size()))
      panels::select_turn(s, *s.a, o.turn - 1);
    else
      s.status = "--turn " + std::to_string(o.turn) + ": run #" + std::to_string(s.a->ref.run) +
                 (s.a->turns.empty() ? std::string(" is a single-turn run")
                                     : " has " + std::to_string(s.a->turns.size()) + " turns");
  }
  if (!o.model.empty()) s.run.form.model_path = o.model;
  if (!s.dbs.empty() && s.run.form.db_path.empty()) s.run.form.db_path = s.dbs[0].path;
  return ok;
}

// Arrow keys move the selected head (left/right) and layer (up/down) in the views with a figure
// when no text field has focus.
static void keyboard(AppState& s) {
  const ImGuiIO& io = ImGui::GetIO();
  if (!s.a || io.WantTextInput || ImGui::IsPopupOpen("", ImGuiPopupFlags_AnyPopupId) || !view_has_figure(s.view))
    return;
  auto pressed = [](ImGuiKey k) { return ImGui::IsKeyPressed(ImGui::GetKeyIndex(k)); };
  if (pressed(ImGuiKey_LeftArrow)) --s.sel.head;
  if (pressed(ImGuiKey_RightArrow)) ++s.sel.head;
  if (pressed(ImGuiKey_UpArrow)) --s.sel.layer;
  if (pressed(ImGuiKey_DownArrow)) ++s.sel.layer;
  clamp_selection(s);
}

void draw_app(AppState& s, Ui& ui) {
  poll_worker(s, ui);
  for (auto& e : s.loader.take_errors()) s.status = std::move(e);
  keyboard(s);
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(vp->WorkPos);
  ImGui::SetNextWindowSize(vp->WorkSize);
  ImGui::PushStyleVar(ImGuiStyleVar_WindowRounding, 0.0f);
  ImGui::PushStyleVar(ImGuiStyleVar_WindowBorderSize, 0.0f);
  const ImGuiWindowFlags flags = ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoMove |
                                 ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings |
                                 ImGuiWindowFlags_MenuBar | ImGuiWindowFlags_NoBringToFrontOnFocus |
                                 ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse;
  ImGui::Begin("kvscope##main", nullptr, flags);
  ImGui::PopStyleVar(2);
  draw_menu(s);
  draw_context_bar(s);
  const float status_h = ImGui::GetFrameHeightWithSpacing();
  if (ImGui::BeginTabBar("views", ImGuiTabBarFlags_FittingPolicyScroll)) {
    for (const ViewEntry& e : view_table()) {
      const View v = e.view();
      const ImGuiTabItemFlags tf = (s.select_view && s.view == v) ? ImGuiTabItemFlags_SetSelected : 0;
      if (ImGui::BeginTabItem(e.title, nullptr, tf)) {
        if (!s.select_view)
          s.view = v;
        else if (v == s.view)
          s.select_view = false;
        ImGui::BeginChild("view_content", {0, -status_h}, false,
                          ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
        // The tab being left while another is selected shows for this one frame: not drawn (it
        // could be the Sessions view reading every run's record).
        if (!s.select_view || v == s.view) e.draw(s, ui);
        ImGui::EndChild();
        ImGui::EndTabItem();
      }
    }
    ImGui::EndTabBar();
  }
  // Status bar.
  ImGui::Separator();
  ImGui::TextDisabled("%s", ellipsize(s.status, 160).c_str());
  ImGui::SameLine(ImGui::GetWindowContentRegionMax().x - 260);
  if (s.run.running) {
    ImGui::TextColored({0.0f, 0.5f, 0.2f, 1}, "running %lld tok", static_cast<long long>(s.run.tokens));
    ImGui::SameLine();
  }
  ImGui::TextDisabled("%zu db, %s  %.1f ms/frame", s.dbs.size(),
                      s.a ? ("run #" + std::to_string(s.a->ref.run)).c_str() : "no run", s.frame_ms);
  ImGui::End();
  panels::export_dialog(s, ui);
}

}  // namespace kvscope::gui
