#include "gui_options.h"

#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "run_worker.h"

#include <stdexcept>

#include "view_table.h"

namespace kvscope::gui {
namespace {

std::int64_t to_int(const std::string& opt, const std::string& v) {
  try {
    std::size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::logic_error&) {
    throw std::invalid_argument(opt + ": '" + v + "' is not an integer");
  }
}

// The view names (view_table.cpp) wrapped to lines of at most `width` characters after `indent`.
std::string wrapped_view_names(std::size_t indent, std::size_t width) {
  std::string out, line;
  for (View v : kAllViews) {
    std::string item = std::string(view_name(v)) + ",";
    if (!line.empty() && indent + line.size() + 1 + item.size() > width)
      out += line + "\n" + std::string(indent, ' '), line.clear();
    line += (line.empty() ? "" : " ") + item;
  }
  if (!line.empty()) line.pop_back();  // the last comma
  return out + line;
}

}  // namespace

std::string gui_usage() {
  return "usage: kvscope [--open DB]... [--run ID[,ID...]] [--view NAME] [--model PATH]\n"
         "               [--layer L] [--head H] [--token T] [--positions LO:HI] [--tokens-coloring C] [--turn N]\n"
         "               [--screenshot FILE.png [--frames N] [--size WxH]]\n"
         "  --open DB        session database to open (repeat for several)\n"
         "  --run IDS        runs of the first database: A, then compare runs (default: the newest run)\n"
         "  --view NAME      " +
         wrapped_view_names(19, 98) +
         "\n"
         "  --model PATH     default model of the Run view\n"
         "  --layer/--head/--token   initial selection\n"
         "  --positions LO:HI   prompt positions the position axes show (zoom)\n"
         "  --tokens-coloring C Tokens view colouring: kept | keep-rate | attention | score\n"
         "  --turn N         a multi-turn run: show turn N (its positions and step; Timeline view)\n"
         "  --screenshot F   render headless and write the last frame to F (PNG), then exit\n"
         "  --frames N       frames to render before the screenshot (default 5)\n"
         "  --size WxH       window size (default 1600x1000)\n"
         "  --start-run F    start a run at launch from a JSON file of the Run view's fields\n"
         "                   (model_path, prompt_file, pipeline_spec, budget_unit, budget_value, device, ...)\n"
         "  --screenshot-at-step N   with --start-run: shoot when the run reaches decode step N\n";
}

GuiOptions parse_gui_options(const std::vector<std::string>& args) {
  GuiOptions o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw std::invalid_argument(a + ": missing value");
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--open") {
      o.open.push_back(value());
    } else if (a == "--run") {
      const std::string v = value();
      std::size_t start = 0;
      while (start <= v.size()) {
        const auto comma = v.find(',', start);
        const std::string part = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!part.empty()) o.runs.push_back(to_int("--run", part));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      if (o.runs.empty()) throw std::invalid_argument("--run: no run id");
    } else if (a == "--view") {
      const std::string v = value();
      o.view = parse_view(v);
      if (!o.view) throw std::invalid_argument("--view: unknown view '" + v + "' (" + view_names() + ")");
    } else if (a == "--model") {
      o.model = value();
    } else if (a == "--screenshot") {
      o.screenshot = value();
    } else if (a == "--frames") {
      o.frames = static_cast<int>(to_int("--frames", value()));
      if (o.frames < 1 || o.frames > 100000) throw std::invalid_argument("--frames: must be in [1, 100000]");
    } else if (a == "--size") {
      const std::string v = value();
      const auto x = v.find('x');
      if (x == std::string::npos) throw std::invalid_argument("--size: expected WxH, got '" + v + "'");
      o.width = static_cast<int>(to_int("--size", v.substr(0, x)));
      o.height = static_cast<int>(to_int("--size", v.substr(x + 1)));
      if (o.width < 200 || o.height < 150 || o.width > 16384 || o.height > 16384)
        throw std::invalid_argument("--size: " + v + " is outside 200x150 .. 16384x16384");
    } else if (a == "--start-run") {
      o.start_run = value();
    } else if (a == "--screenshot-at-step") {
      o.screenshot_at_step = to_int("--screenshot-at-step", value());
      if (o.screenshot_at_step < 0) throw std::invalid_argument("--screenshot-at-step: must be >= 0");
    } else if (a == "--layer") {
      o.layer = to_int("--layer", value());
    } else if (a == "--head") {
      o.head = to_int("--head", value());
    } else if (a == "--token") {
      o.token = to_int("--token", value());
    } else if (a == "--turn") {
      o.turn = static_cast<int>(to_int("--turn", value()));
      if (o.turn < 1) throw std::invalid_argument("--turn: turns count from 1");
    } else if (a == "--tokens-coloring") {
      const std::string v = value();
      if (v == "kept")
        o.tokens_coloring = 0;
      else if (v == "keep-rate")
        o.tokens_coloring = 1;
      else if (v == "attention")
        o.tokens_coloring = 2;
      else if (v == "score")
        o.tokens_coloring = 3;
      else
        throw std::invalid_argument("--tokens-coloring: '" + v + "' is not kept | keep-rate | attention | score");
    } else if (a == "--positions") {
      const std::string v = value();
      const auto c = v.find(':');
      if (c == std::string::npos) throw std::invalid_argument("--positions: expected LO:HI, got '" + v + "'");
      o.pos_lo = to_int("--positions", v.substr(0, c));
      o.pos_hi = to_int("--positions", v.substr(c + 1));
      if (o.pos_lo < 0 || o.pos_hi < o.pos_lo)
        throw std::invalid_argument("--positions: " + v + " is not a range 0 <= LO <= HI");
    } else {
      throw std::invalid_argument("unknown option '" + a + "' (see --help)");
    }
  }
  return o;
}

void read_run_request(const std::string& path, RunRequest& req) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(path + ": cannot open the run request");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::invalid_argument(path + ": not JSON (" + std::string(e.what()).substr(0, 120) + ")");
  }
  if (!j.is_object()) throw std::invalid_argument(path + ": expected a JSON object of the Run view's fields");
  auto text = [&](const std::string& key, const nlohmann::json& v) {
    if (!v.is_string()) throw std::invalid_argument(path + ": '" + key + "' must be a string");
    return v.get<std::string>();
  };
  auto number = [&](const std::string& key, const nlohmann::json& v) {
    if (!v.is_number()) throw std::invalid_argument(path + ": '" + key + "' must be a number");
    return v.get<double>();
  };
  auto flag = [&](const std::string& key, const nlohmann::json& v) {
    if (!v.is_boolean()) throw std::invalid_argument(path + ": '" + key + "' must be true or false");
    return v.get<bool>();
  };
  for (const auto& [key, v] : j.items()) {
    if (key == "model_path")
      req.model_path = text(key, v);
    else if (key == "random_init")
      req.random_init = text(key, v);
    else if (key == "tokenizer_path")
      req.tokenizer_path = text(key, v);
    else if (key == "prompt")
      req.prompt = text(key, v);
    else if (key == "prompt_file") {
      std::ifstream f(text(key, v), std::ios::binary);
      if (!f) throw std::invalid_argument(path + ": prompt_file '" + v.get<std::string>() + "' cannot be read");
      req.prompt.assign(std::istreambuf_iterator<char>(f), {});
    } else if (key == "turns") {  // later user turns, in order (kvscope-cli run --turn)
      if (!v.is_array()) throw std::invalid_argument(path + ": 'turns' must be a list of strings");
      req.turns.clear();
      for (const auto& t : v) req.turns.push_back(text(key, t));
    } else if (key == "chat")
      req.chat = flag(key, v);
    else if (key == "system")
      req.system = text(key, v);
    else if (key == "bos")
      req.bos = text(key, v);
    else if (key == "pipeline_spec")
      req.pipeline_spec = text(key, v);
    else if (key == "budget_unit")
      req.budget_unit = text(key, v);
    else if (key == "budget_value")
      req.budget_value = number(key, v);
    else if (key == "device")
      req.device = text(key, v);
    else if (key == "dtype")
      req.dtype = text(key, v);
    else if (key == "max_new_tokens")
      req.max_new_tokens = static_cast<std::int64_t>(number(key, v));
    else if (key == "allow_beyond_context")
      req.allow_beyond_context = flag(key, v);
    else if (key == "reference_full")
      req.reference_full = flag(key, v);
    else if (key == "capture")
      req.capture = text(key, v);
    else if (key == "capture_window")
      req.capture_window = static_cast<std::int64_t>(number(key, v));
    else if (key == "db_path")
      req.db_path = text(key, v);
    else if (key == "name")
      req.name = text(key, v);
    else
      throw std::invalid_argument(path + ": unknown key '" + key + "'");
  }
}

}  // namespace kvscope::gui
