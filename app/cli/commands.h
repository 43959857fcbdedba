#pragma once
// Subcommands of kvscope-cli: each registers its options on the app and returns its runner.
#include <functional>

#include <CLI/CLI.hpp>

namespace kvscope::cli {

/// A parsed subcommand's body; returns the process exit code.
using Runner = std::function<int()>;

Runner add_generate(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_policies(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_compare(CLI::App& app);
Runner add_merge(CLI::App& app);
Runner add_check(CLI::App& app);
Runner add_timeline(CLI::App& app);
Runner add_sweep(CLI::App& app);
Runner add_export(CLI::App& app);  // only with KVSCOPE_WITH_VIZ
Runner add_learn_heads(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_chat_template(CLI::App& app);
Runner add_eval(CLI::App& app);

}  // namespace kvscope::cli
