// Task-accuracy evaluation (kvscope-cli eval, app/run/eval_prompt + eval_run) on the embedded
// pycode-recall-17m against its golden RULER file (transformers 5.17 + kvpress 0.5.4, fp32): every
// sample's prompt assembles to the recorded token ids with the recorded question split; the full
// cache and kvpress's presses (question-agnostic, and SnapKV question-aware) give the recorded
// outputs on a few 2K samples; a session records every sample as a run and an evaluation resumes
// from it; bad input fails in one line naming what is wrong.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../core/test_support.h"
#include "cli_support.h"
#include "eval_prompt.h"
#include "kvscope/core/chat_template.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/eval_sample.h"
#include "kvscope/core/model.h"
#include "kvscope/core/tokenizer.h"
#include "kvscope/sessions/session_store.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::quote;
using test::run_cli;
using test::run_cli_stderr;

fs::path recall_dir() { return test::source_dir() / "assets/models/pycode-recall-17m"; }
fs::path golden_file() { return recall_dir() / "golden/ruler.jsonl"; }

std::vector<json> golden_rows() {
  std::vector<json> rows;
  std::ifstream in(golden_file());
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

TEST(EvalPrompt, AssemblesEveryGoldenSampleToItsRecordedIdsAndQuestionSplit) {
  const Model model = load_model(recall_dir(), {});
  const ChatTemplate tmpl = ChatTemplate::load(recall_dir());
  const std::vector<EvalSample> samples = load_eval_samples(golden_file());
  const std::vector<json> rows = golden_rows();
  ASSERT_EQ(samples.size(), 54u);
  int chat = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    SCOPED_TRACE(samples[i].id);
    const run::EvalPrompt p = run::assemble_eval_prompt(model, &tmpl, samples[i]);
    EXPECT_EQ(p.text, rows[i]["prompt"].get<std::string>());
    EXPECT_EQ(p.ids, rows[i]["prompt_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(p.question_start, rows[i]["question_start"].get<int64_t>());
    chat += samples[i].chat;
    // Without needle spans in the file, the needles are the answers' occurrences in the context:
    // each span's tokens decode to text holding (part of) an answer, before the question.
    if (samples[i].task.rfind("niah_single", 0) == 0) {
      ASSERT_EQ(p.needle_ids.size(), 1u);
      const auto& n = p.needle_ids[0];
      EXPECT_LT(n.end, p.question_start);
      const std::string text =
          model.tokenizer->decode(std::vector<int32_t>(p.ids.begin() + n.begin, p.ids.begin() + n.end));
      EXPECT_NE(text.find(samples[i].answers[0]), std::string::npos) << text;
    }
  }
  EXPECT_GT(chat, 0);
  EXPECT_LT(chat, 54);  // both chat and plain prompts were checked
}

// eval --devices: the parent process reads the samples with the model on the meta device (no
// weights, no CUDA before the workers fork); its prompts must be the ones a loaded model gives.
TEST(EvalPrompt, AModelOnTheMetaDeviceAssemblesTheSamePrompts) {
  const Model model = load_model(recall_dir(), {});
  LoadOptions meta_options;
  meta_options.device = c10::Device(c10::kMeta);
  const Model meta = load_model(recall_dir(), meta_options);
  EXPECT_TRUE(meta.weights.embed.is_meta());
  EXPECT_EQ(meta.config.n_layer, model.config.n_layer);
  const ChatTemplate tmpl = ChatTemplate::load(recall_dir());
  const std::vector<EvalSample> samples = load_eval_samples(golden_file());
  for (size_t i = 0; i < samples.size(); i += 9) {
    SCOPED_TRACE(samples[i].id);
    const run::EvalPrompt a = run::assemble_eval_prompt(model, &tmpl, samples[i]);
    const run::EvalPrompt b = run::assemble_eval_prompt(meta, &tmpl, samples[i]);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(a.question_start, b.question_start);
    EXPECT_EQ(a.needle_ids, b.needle_ids);
  }
}

TEST(EvalPrompt, NeedleSpansFromTheFileMapToTheirTokens) {
  const Model model = load_model(recall_dir(), {});
  EvalSample s;
  s.id = "x";
  s.chat = false;
  s.instruction = "Remember this.\n";
  s.context = "The grass is green. The magic number is 4242. The sky is blue.";
  s.question = "\nWhat is the magic number?";
  s.answer_prefix = " The number is";
  s.answers = {"4242"};
  s.max_new_tokens = 8;
  s.metric = "string_match_all";
  const size_t at = s.context.find("The magic");
  s.needles = {{int64_t(at), int64_t(at + std::string("The magic number is 4242.").size())}};
  const run::EvalPrompt p = run::assemble_eval_prompt(model, nullptr, s);
  ASSERT_EQ(p.needle_ids.size(), 1u);
  const std::string text = model.tokenizer->decode(
      std::vector<int32_t>(p.ids.begin() + p.needle_ids[0].begin, p.ids.begin() + p.needle_ids[0].end));
  EXPECT_NE(text.find("magic number is 4242"), std::string::npos) << text;
  EXPECT_EQ(text.find("grass"), std::string::npos) << text;
  EXPECT_EQ(p.text, s.instruction + s.context + s.question + s.answer_prefix);
  // A chat sample for a model without a template is refused, naming the model.
  s.chat = true;
  try {
    run::assemble_eval_prompt(model, nullptr, s);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("has no chat template"), std::string::npos) << e.what();
  }
}

class CliEval : public test::CliTest {
 protected:
  /// The golden rows with these ids, as a JSONL file; returns its path.
  fs::path subset(const std::vector<std::string>& ids) {
    const fs::path out = dir_ / "subset.jsonl";
    std::ofstream f(out);
    for (const json& r : golden_rows())
      if (std::find(ids.begin(), ids.end(), r["id"].get<std::string>()) != ids.end()) f << r.dump() << "\n";
    return out;
  }
  json eval(const std::string& args) {
    const auto r = run_cli("eval --model " + quote(recall_dir()) + " " + args + " --json");
    EXPECT_EQ(r.exit_code, 0) << args;
    return r.exit_code == 0 ? json::parse(r.out) : json();
  }
};

const std::vector<std::string> kIds = {"niah_single_noise-2048-0", "niah_single_code-2048-0"};

TEST_F(CliEval, FullCacheAndKvpressPressesGiveTheRecordedOutputs) {
  const fs::path data = subset(kIds);
  std::map<std::string, json> golden;
  for (const json& r : golden_rows()) golden[r["id"].get<std::string>()] = r;
  // kvpress press -> kvscope pipeline and mode (docs/eval.md "Matching kvpress").
  const std::vector<std::tuple<std::string, std::string, std::string>> configs = {
      {"full", "", ""},
      {"snapkv@0.5", "--pipeline snapkv:window=64,kernel=5,pool=avg --compression-ratio 0.5", "--question-agnostic"},
      {"streamingllm@0.8", "--pipeline streamingllm:sink=4 --compression-ratio 0.8", ""},
      {"adakv-snapkv@0.5", "--pipeline snapkv:window=64,kernel=5,pool=avg+adakv:alpha=0.2 --compression-ratio 0.5", ""},
      {"snapkv-question-aware@0.5", "--pipeline snapkv:window=64,kernel=5,pool=avg --compression-ratio 0.5",
       "--question-aware"},
  };
  for (const auto& [name, pipeline, mode] : configs) {
    SCOPED_TRACE(name);
    const json j = eval("--data " + quote(data) + " " + pipeline + " " + mode);
    ASSERT_EQ(j["results"].size(), 1u);
    const json& res = j["results"][0];
    EXPECT_EQ(res["mode"], mode == "--question-aware" ? "question-aware" : "question-agnostic");
    double sum = 0;
    for (const json& s : res["samples"]) {
      const json& g = golden.at(s["id"].get<std::string>());
      const json& ref = name == "full" ? g["full"] : g["kvpress"][name];
      EXPECT_EQ(s["output"], ref["output"]) << s["id"];
      EXPECT_EQ(s["score"].get<double>(), ref["score"].get<double>()) << s["id"];
      sum += s["score"].get<double>();
    }
    EXPECT_DOUBLE_EQ(res["score"].get<double>(), sum / double(kIds.size()));
  }
}

TEST_F(CliEval, SweepsPipelinesByBudgetsRecordsEverySampleAndResumes) {
  const fs::path data = subset({kIds[0]});
  const std::string args = "--data " + quote(data) + " --pipeline streamingllm:sink=4 --pipeline knorm" +
                           " --compression-ratio 0.5 --compression-ratio 0.9 --db " + quote(db_);
  const json first = eval(args);
  ASSERT_EQ(first["results"].size(), 4u);  // 2 pipelines x 2 ratios
  std::set<int64_t> runs;
  for (const json& r : first["results"]) {
    ASSERT_EQ(r["samples"].size(), 1u);
    runs.insert(r["samples"][0]["run_id"].get<int64_t>());
    EXPECT_NE(r["budget"], nullptr);
  }
  EXPECT_EQ(runs.size(), 4u);
  // Where the items' time went: each phase measured, together within the items' wall time.
  const json& phases = first["seconds"]["phases"];
  double phase_sum = 0;
  for (const char* p : {"shared_prefill", "prefill", "decode", "setup", "record"}) {
    ASSERT_TRUE(phases.contains(p)) << phases.dump();
    EXPECT_GE(phases[p].get<double>(), 0.0) << p;
    phase_sum += phases[p].get<double>();
  }
  EXPECT_GT(phases["decode"].get<double>(), 0.0);
  EXPECT_GT(phases["record"].get<double>(), 0.0);  // with --db
  EXPECT_LE(phase_sum, first["seconds"]["run"].get<double>() * 1.001 + 1e-3) << phases.dump();
  {
    const auto store = sessions::SessionStore::open(db_.string(), sessions::OpenMode::kReadOnly);
    const auto rows = store.list_runs();
    ASSERT_EQ(rows.size(), 4u);
    for (const auto& row : rows) {
      EXPECT_EQ(row.status, sessions::RunStatus::kComplete);
      ASSERT_TRUE(row.summary.count("eval_score"));
      ASSERT_TRUE(row.sweep_key && row.sweep_key->starts_with("eval1|"));
      EXPECT_EQ(store.load_blobs(row.id, "eval_sample").size(), 1u);
      EXPECT_EQ(store.load_blobs(row.id, "needle_kept").size(), 1u);
    }
  }
  // Again: every item is found in the database, nothing runs, the same results come back.
  json again = eval(args);
  EXPECT_GE(again["seconds"]["run"].get<double>(), 0.0);
  again.erase("seconds");
  json first_results = first;
  first_results.erase("seconds");
  EXPECT_EQ(again, first_results);
  const auto store = sessions::SessionStore::open(db_.string(), sessions::OpenMode::kReadOnly);
  EXPECT_EQ(store.list_runs().size(), 4u);
}

TEST(EvalPrompt, LaterTurnsAreWhatTheTemplateWritesBetweenAnswers) {
  // ChatML (pycode-recall-17m): after the answer the template writes "<|im_end|>\n", then the next
  // user message and the generation prompt. The model's own <|im_end|> (a stop id) is fed back
  // first, so a turn's tokens start at the newline; the answer prefix follows without its space.
  const Model model = load_model(recall_dir(), {});
  const ChatTemplate tmpl = ChatTemplate::load(recall_dir());
  EvalSample s = load_eval_samples(golden_file()).at(0);
  s.chat = true;
  s.turns = {{"\nAnd the other one?", " The other one is", {"1"}}, {"\nLast?", "", {"2"}}};
  const run::EvalPrompt p = run::assemble_eval_prompt(model, &tmpl, s);
  ASSERT_EQ(p.turn_ids.size(), 2u);
  EXPECT_EQ(p.turn_ids[0],
            model.tokenizer->encode("\n<|im_start|>user\n\nAnd the other one?<|im_end|>\n<|im_start|>assistant\nThe "
                                    "other one is"));
  EXPECT_EQ(p.turn_ids[1], model.tokenizer->encode("\n<|im_start|>user\n\nLast?<|im_end|>\n<|im_start|>assistant\n"));
  // The first turn is as without turns; a plain sample's turn is its question and answer prefix.
  EvalSample one = s;
  one.turns.clear();
  EXPECT_EQ(run::assemble_eval_prompt(model, &tmpl, one).ids, p.ids);
  s.chat = false;
  EXPECT_EQ(run::assemble_eval_prompt(model, &tmpl, s).turn_ids.at(0),
            model.tokenizer->encode("\nAnd the other one? The other one is"));
}

TEST_F(CliEval, LaterTurnsAreScoredEachAndResumed) {
  // niah_multikey_1 with two later turns: each turn's output scored against its own key's value,
  // the item's score their mean; a second run finds the items in the database with their turns.
  const std::string args =
      "--task niah_multikey_1 --haystack noise --turns 2 --length 1024 --n 2 --seed 5 "
      "--write-samples " +
      quote(dir_ / "mt.jsonl") + " --pipeline snapkv --budget 96 --db " + quote(db_);
  const json first = eval(args);
  ASSERT_EQ(first["results"].size(), 1u);
  const std::vector<EvalSample> samples = load_eval_samples(dir_ / "mt.jsonl");
  ASSERT_EQ(samples.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const json& row = first["results"][0]["samples"][i];
    ASSERT_EQ(row["turns"].size(), 3u) << row.dump();
    EXPECT_EQ(row["turns"][0]["output"], row["output"]);
    double sum = 0;
    for (size_t t = 0; t < 3; ++t) {
      const std::vector<std::string>& answers = t == 0 ? samples[i].answers : samples[i].turns[t - 1].answers;
      const std::string out = row["turns"][t]["output"].get<std::string>();
      const double want = out.find(answers[0]) != std::string::npos ? 1.0 : 0.0;
      EXPECT_EQ(row["turns"][t]["score"].get<double>(), want) << "turn " << t << ": " << out;
      sum += want;
    }
    EXPECT_DOUBLE_EQ(row["score"].get<double>(), sum / 3);
  }
  json again = eval(args);
  again.erase("seconds");
  json first_results = first;
  first_results.erase("seconds");
  EXPECT_EQ(again, first_results);
  EXPECT_NE(run_cli("eval --model " + quote(recall_dir()) + " --task vt --turns 1 --length 1024 --n 1", true)
                .out.find("later turns ask for other keys"),
            std::string::npos);
}

TEST_F(CliEval, ReadsKvpressColumns) {
  const json g = golden_rows()[0];
  // kvpress's columns: the instruction is part of the context, one "answer".
  json k = {{"context", g["instruction"].get<std::string>() + g["context"].get<std::string>()},
            {"question", g["question"]},
            {"answer_prefix", g["answer_prefix"]},
            {"answer", g["answers"][0]},
            {"task", "niah_single_1"},
            {"max_new_tokens", 16}};
  std::ofstream(dir_ / "kvpress.jsonl") << k.dump() << "\n";
  const json j = eval("--data " + quote(dir_ / "kvpress.jsonl"));
  EXPECT_EQ(j["results"][0]["samples"][0]["output"], g["full"]["output"]);
  EXPECT_EQ(j["results"][0]["score"], 1.0);
}

TEST_F(CliEval, BadInputFailsInOneLine) {
  const fs::path data = subset({kIds[0]});
  auto fails = [&](const std::string& args, const std::string& needle) {
    const auto r = run_cli_stderr("eval --model " + quote(recall_dir()) + " " + args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.out.find(needle), std::string::npos) << args << "\n" << r.out;
  };
  fails("--data " + quote(dir_ / "missing.jsonl"), "missing.jsonl: no such file");
  fails("", "give --data FILE.jsonl or --task NAME");
  fails("--data " + quote(data) + " --compression-ratio 0.5", "a budget without --pipeline");
  fails("--data " + quote(data) + " --pipeline snapkv", "give --compression-ratio R or --budget N");
  fails("--data " + quote(data) + " --pipeline nosuch --compression-ratio 0.5", "nosuch");
  fails("--data " + quote(data) + " --pipeline nosuch", "nosuch");  // the typo, not the missing budget
  fails("--data " + quote(data) + " --devices 0,1", "give --db");
  fails("--data " + quote(data) + " --devices 0,x --db " + quote(dir_ / "d.db"), "--devices must be CUDA device ids");
  fails("--data " + quote(data) + " --devices 1,1 --db " + quote(dir_ / "d.db"), "names cuda:1 twice");
  {
    const auto r =
        run_cli_stderr("eval --random-init " + quote(recall_dir() / "config.json") + " --data " + quote(data));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.out.find("give --tokenizer DIR"), std::string::npos) << r.out;
  }
  fails("--data " + quote(data) + " --question-agnostic --question-aware", "excludes");
  std::ofstream(dir_ / "bad.jsonl")
      << "{\"context\": \"x\", \"question\": \"y\", \"answers\": [], \"max_new_tokens\": 4}\n";
  fails("--data " + quote(dir_ / "bad.jsonl"), "bad.jsonl: line 1: 'answers' is empty");
}

}  // namespace
}  // namespace kvscope

namespace kvscope {
namespace {

// Prefill once, compress many: configurations evaluated together (one shared prefill of the
// context per sample, or of the whole prompt question-aware) give exactly what each gives
// evaluated alone (its own prefill), also with a decode-time stage and a pipeline that cannot
// share (H2O reads every prefill query).
TEST_F(CliEval, SharedPrefillGivesWhatSeparatePrefillsGive) {
  const std::string task = "--task niah_single_1 --length 1024 --n 1 --seed 7";
  const std::vector<std::string> pipelines = {"snapkv:window=64,kernel=5,pool=avg", "tova",
                                              "snapkv:window=16+quest:page=16,k=64", "h2o"};
  std::string all;
  for (const auto& p : pipelines) all += " --pipeline " + p;
  const json together = eval(task + all + " --compression-ratio 0.5 --compression-ratio 0.8");
  ASSERT_EQ(together["results"].size(), pipelines.size() * 2);
  std::set<std::string> outputs;  // the configurations differ: sharing did not give them one cache
  for (const json& r : together["results"]) outputs.insert(r["samples"][0]["output"].get<std::string>());
  EXPECT_GE(outputs.size(), 3u);
  size_t r = 0;
  for (const auto& p : pipelines)
    for (const char* ratio : {"0.5", "0.8"}) {
      SCOPED_TRACE(p + " @ " + ratio);
      if (std::string(ratio) == "0.8" && p != pipelines[0]) {  // one alone run per pipeline is enough
        ++r;
        continue;
      }
      const json alone = eval(task + " --pipeline " + p + " --compression-ratio " + ratio);
      ASSERT_EQ(alone["results"].size(), 1u);
      const json& a = alone["results"][0];
      const json& t = together["results"][r++];
      EXPECT_EQ(t["pipeline"], a["pipeline"]);
      ASSERT_EQ(t["samples"].size(), a["samples"].size());
      for (size_t i = 0; i < a["samples"].size(); ++i) {
        EXPECT_EQ(t["samples"][i]["output"], a["samples"][i]["output"]);
        EXPECT_EQ(t["samples"][i]["needle_kept"], a["samples"][i]["needle_kept"]);
      }
    }
  EXPECT_GT(together["seconds"]["phases"]["shared_prefill"].get<double>(), 0.0);

  // Question-aware: the whole prompt is prefilled once and compressed per configuration.
  const std::string aware = task + " --question-aware";
  const json both =
      eval(aware + " --pipeline " + pipelines[0] + " --pipeline " + pipelines[2] + " --compression-ratio 0.5");
  EXPECT_GT(both["seconds"]["phases"]["shared_prefill"].get<double>(), 0.0);
  ASSERT_EQ(both["results"].size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    const std::string& p = pipelines[k == 0 ? 0 : 2];
    SCOPED_TRACE("question-aware " + p);
    const json alone = eval(aware + " --pipeline " + p + " --compression-ratio 0.5");
    EXPECT_EQ(alone["seconds"]["phases"]["shared_prefill"].get<double>(), 0.0);  // one item: nothing to share
    EXPECT_EQ(both["results"][k]["samples"][0]["output"], alone["results"][0]["samples"][0]["output"]);
    EXPECT_EQ(both["results"][k]["samples"][0]["needle_kept"], alone["results"][0]["samples"][0]["needle_kept"]);
  }
  // The question-aware items compressed the question too: not what the agnostic items kept.
  EXPECT_NE(both["results"][0]["samples"][0]["needle_kept"].dump() + both["results"][0]["samples"][0]["output"].dump(),
            together["results"][0]["samples"][0]["needle_kept"].dump() +
                together["results"][0]["samples"][0]["output"].dump());
}

}  // namespace
}  // namespace kvscope

namespace kvscope {
namespace {

// Shards write their own databases; merged, they hold every item, and the same evaluation over the
// merged database runs nothing and reports what the shards recorded. --emit-slurm writes the array.
TEST_F(CliEval, ShardsMergeIntoOneEvaluationAndSlurmArraysRunThem) {
  const std::string args =
      "--task niah_single_1 --length 1024 --n 3 --seed 3 --pipeline streamingllm:sink=4"
      " --compression-ratio 0.5";
  const fs::path a = dir_ / "a.db", b = dir_ / "b.db", all = dir_ / "all.db";
  const json s0 = eval(args + " --shard 0/2 --db " + quote(a));
  const json s1 = eval(args + " --shard 1/2 --db " + quote(b));
  ASSERT_EQ(s0["results"][0]["samples"].size(), 2u);  // items 0 and 2
  ASSERT_EQ(s1["results"][0]["samples"].size(), 1u);  // item 1
  ASSERT_EQ(run_cli("merge --out " + quote(all) + " " + quote(a) + " " + quote(b)).exit_code, 0);
  const json merged = eval(args + " --db " + quote(all));
  ASSERT_EQ(merged["results"][0]["samples"].size(), 3u);
  EXPECT_EQ(merged["results"][0]["samples"][0]["output"], s0["results"][0]["samples"][0]["output"]);
  EXPECT_EQ(merged["results"][0]["samples"][1]["output"], s1["results"][0]["samples"][0]["output"]);
  EXPECT_EQ(merged["results"][0]["samples"][2]["output"], s0["results"][0]["samples"][1]["output"]);
  EXPECT_EQ(sessions::SessionStore::open(all.string(), sessions::OpenMode::kReadOnly).list_runs().size(), 3u);

  const fs::path job = dir_ / "job.sh";
  ASSERT_EQ(run_cli("eval --model " + quote(recall_dir()) + " " + args + " --shard 0/4 --db " + quote(all) +
                    " --emit-slurm " + quote(job))
                .exit_code,
            0);
  std::ifstream in(job);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_NE(text.find("#SBATCH --array=0-3"), std::string::npos) << text;
  EXPECT_NE(text.find("--shard ${SLURM_ARRAY_TASK_ID}/4"), std::string::npos) << text;
  EXPECT_NE(text.find("--pipeline 'streamingllm:sink=4'"), std::string::npos) << text;
  EXPECT_NE(text.find("kvscope-cli merge"), std::string::npos) << text;
}

}  // namespace
}  // namespace kvscope
