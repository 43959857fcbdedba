// kvscope-cli learn-heads: learn a head pattern (HS-SFT windows or DuoAttention gates) on training
// text and write the kvscope.head_pattern.v1 file that `--pipeline heads:pattern=FILE` runs.
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>

#include <ATen/ATen.h>

#include "commands.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/learn/learn_heads.h"
#include "kvscope/core/learn/pattern_file.h"
#include "kvscope/core/model.h"

namespace kvscope::cli {

Runner add_learn_heads(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("learn-heads", "Learn a head pattern (HS-SFT or DuoAttention) for a model; weights frozen");
  struct Args {
    std::string model, tokenizer, data, method = "hs-sft", out, device = "cpu", dtype = "fp32", ste = "softmax";
    learn::LearnOptions o;
  };
  auto a = std::make_shared<Args>();
  learn::LearnOptions& o = a->o;
  cmd->add_option("--model", a->model, "Model: Hugging Face directory or llama2.c .bin")->required();
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file overriding the model's own");
  cmd->add_option("--data", a->data, "Training text: a glob of files (quote it; ** matches any directories)")
      ->required();
  cmd->add_option("--method", a->method, "hs-sft | duo")->required();
  cmd->add_option("--budget", o.budget, "Fraction of the full KV cache bytes kept at --reference-length, in (0, 1]")
      ->required();
  cmd->add_option("--steps", o.steps, "Optimizer steps (hs-sft: of the window phase)")->required();
  cmd->add_option("--out", a->out, "Pattern file to write (PATTERN.json; the loss curve goes to PATTERN.loss.csv)")
      ->required();
  cmd->add_option("--device", a->device, "cpu | cuda | cuda:i");
  cmd->add_option("--dtype", a->dtype, "fp32 | bf16 | fp16")->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--seq-len", o.seq_len, "Tokens per training sequence (default 1024, capped at the model's context)");
  cmd->add_option("--batch", o.batch, "Sequences per step (default 4)");
  cmd->add_option("--reference-length", o.reference_length,
                  "Context length N the budget is measured on (default --seq-len); the default --sink, --window and "
                  "--block scale with it on models of less than 8192 tokens of context");
  cmd->add_option("--max-tokens", o.max_tokens, "Training tokens to read (default steps x batch x seq-len)");
  cmd->add_option("--lr", o.lr, "Adam learning rate (default duo 0.02, hs-sft 0.01)");
  cmd->add_option("--seed", o.seed, "File order and minibatch seed");
  cmd->add_option("--sink", o.sink,
                  "Sink tokens of every streaming head (default 128 as in HS-SFT Table 6 when the model's context or "
                  "--reference-length N is 8192+ tokens; else N/64: 8 on stories260K, 16 on pycode-16m)");
  cmd->add_option(
      "--window", o.window,
      "duo: streaming window (default 256 as in DuoAttention when the model's context or N is 8192+ tokens; "
      "else N/32: 16 on stories260K, 32 on pycode-16m)");
  cmd->add_option("--block", o.block,
                  "hs-sft: candidate windows are {1..m} x block (default 128 as in HS-SFT Table 6 when the model's "
                  "context or N is 8192+ tokens; else N/64: 8 on stories260K, 16 on pycode-16m)");
  cmd->add_option("--candidates", o.n_candidates, "hs-sft: m, the number of candidate windows (default 8)");
  cmd->add_option("--dense-fraction", o.dense_fraction, "hs-sft: alpha, dense KV heads (default budget - 0.05)");
  cmd->add_option("--lambda", o.lambda,
                  "Regulariser weight (default duo 0.05 on sum |gate|; hs-sft 0.01 on the balance KL)");
  cmd->add_option("--gamma", o.gamma, "hs-sft: prior shape gamma (default 2)");
  cmd->add_option("--tau", o.tau, "hs-sft: softmax temperature of the window logits (default 1)");
  cmd->add_option("--ste", a->ste,
                  "hs-sft gradient: softmax (straight-through softmax) | selected (eq. 2: argmax logit only)")
      ->check(CLI::IsMember({"softmax", "selected"}));
  cmd->add_option("--init-steps", o.init_steps,
                  "hs-sft: DuoAttention gate steps that rank the dense heads (default steps/2)");
  cmd->add_option("--log-every", o.log_every, "Print the loss every N steps (default 10)");
  return [a, cmd]() {
    learn::LearnOptions o = a->o;
    // Unset sizes hold the "derived" sentinel (learn_heads.h); a value given on the command line
    // must not be mistaken for it.
    const auto given = [cmd](const char* name) { return cmd->get_option(name)->count() > 0; };
    if (given("--seq-len") && o.seq_len < 2)
      throw InputError("--seq-len must be >= 2, got " + std::to_string(o.seq_len));
    if (given("--sink") && o.sink < 0) throw InputError("--sink must be >= 0, got " + std::to_string(o.sink));
    for (const auto& [name, value] : {std::pair<const char*, int64_t>{"--window", o.window}, {"--block", o.block}})
      if (given(name) && value < 1) throw InputError(std::string(name) + " must be >= 1, got " + std::to_string(value));
    o.method = learn::parse_learn_method(a->method);
    o.ste = a->ste == "selected" ? learn::SteMode::kSelected : learn::SteMode::kSoftmax;
    const c10::Device dev(a->device);
    if (dev.is_cuda() && !at::hasCUDA())
      throw InputError("--device " + a->device + ": this build of kvscope has no CUDA (LibTorch is CPU-only)");
    const Model model = load_model(a->model, LoadOptions{dev, parse_dtype(a->dtype), a->tokenizer});
    o = learn::resolve_defaults(o, model.config);  // seq_len, sink, window, block: as the run uses them
    learn::validate(o, model.config);
    std::cerr << "learn-heads: " << a->method << " on " << a->model << " (" << model.config.n_layer << " layers x "
              << model.config.n_head_kv << " KV heads), budget " << o.budget << ", " << o.steps << " steps of "
              << o.batch << " x " << o.seq_len << " tokens, sink " << o.sink
              << (o.method == learn::LearnMethod::kDuo
                      ? ", window " + std::to_string(o.window)
                      : ", candidate windows {1.." + std::to_string(o.n_candidates) + "} x " + std::to_string(o.block))
              << "\n";
    auto progress = [](const learn::LossPoint& p) {
      std::fprintf(stderr, "  step %5lld  %-6s  loss %.6f  (task %.6f, reg %.6f)\n", static_cast<long long>(p.step),
                   p.phase.c_str(), p.loss, p.task_loss, p.reg_loss);
    };
    const learn::LearnResult r = learn::learn_head_pattern(model, a->data, o, progress);
    learn::save_learned_pattern(a->out, r, o);
    int64_t streaming = 0, total = 0;
    for (const auto& layer : r.pattern.layers)
      for (const auto& h : layer) streaming += h.streaming, ++total;
    std::fprintf(stderr, "  data: %lld files, %lld tokens, %lld sequences\n", static_cast<long long>(r.n_files),
                 static_cast<long long>(r.n_tokens), static_cast<long long>(r.n_sequences));
    std::fprintf(stderr, "  evaluation batch: loss %.6f -> %.6f (task %.6f -> %.6f)\n", r.initial_loss, r.final_loss,
                 r.initial_task_loss, r.final_task_loss);
    std::printf(
        "wrote %s: %lld of %lld KV heads streaming, kept fraction %.4f of the full cache at %lld tokens (budget %g)\n",
        a->out.c_str(), static_cast<long long>(streaming), static_cast<long long>(total), r.budget_achieved,
        static_cast<long long>(r.reference_length), o.budget);
    std::printf("loss curve: %s\n", learn::loss_curve_path(a->out).c_str());
    return 0;
  };
}

}  // namespace kvscope::cli
