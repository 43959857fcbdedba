#pragma once
// RULER's synthetic evaluation tasks, generated in C++ (torch-free, kvscope_spec): the recipes of
// NVIDIA/RULER scripts/data/synthetic (niah.py, variable_tracking.py, common_words_extraction.py,
// freq_words_extraction.py) with the templates of its constants.py and synthetic.yaml, plus a
// Paul-Graham-style needle in a haystack. docs/eval.md ("Generated tasks (RULER)") describes each
// task, its haystack, sizing, word source and how it differs from RULER.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kvscope/core/eval_sample.h"  // EvalSample, TextSpan

namespace kvscope {

struct RulerTaskOptions {
  std::string task;       ///< a name from ruler_task_names()
  int64_t length = 4096;  ///< token budget: prompt + max_new_tokens <= length
  int64_t n = 1;          ///< samples to generate (niah_paul_graham: per depth)
  uint64_t seed = 42;
  std::vector<std::filesystem::path> essay_files;  ///< essay haystack text (niah_single_2/3, multikey_1, multivalue,
                                                   ///< multiquery, paul_graham), concatenated in this order
  std::vector<std::filesystem::path> code_files;   ///< "code" haystack: source files, used line by line
  std::string haystack;        ///< "" = the task's RULER default; else "noise" | "needle" | "essay" | "code"
  std::vector<double> depths;  ///< niah_paul_graham: depth percents in [0, 100] (one sample per depth x n;
                               ///< empty: 0, 10, ..., 100); else ignored
  bool chat = true;            ///< copied into each EvalSample::chat
  /// RULER's --remove_newline_tab (scripts/data/prepare.py; off in its config_tasks.sh): after
  /// sizing, every run of spaces, newlines and tabs becomes one space (noise lines joined by spaces,
  /// as in pycode-recall-17m's golden samples); the needles' spans move with the text.
  bool remove_newline_tab = false;
  /// The word list of cwe's words, and the words niah's keys may use: one word a line (Debian's
  /// wamerican; only lines of 3-12 lowercase ASCII letters are used).
  std::filesystem::path words_file = "/usr/share/dict/american-english";
  /// WordNet's index.adj and index.noun (Debian's wordnet-base): niah's adjective-noun keys are
  /// drawn from their common adjectives and nouns, as RULER draws them from wonderwords' lists.
  std::filesystem::path wordnet_dir = "/usr/share/wordnet";
  /// Later turns per sample (multi-turn, SCBench's shared-context setting; niah tasks only): turn
  /// t asks for another key of the same context that no earlier turn asked, in the templates'
  /// one-key form. At most the keys the task places but does not ask (niah_multikey_1: 3).
  int64_t turns = 0;
};

/// Tokens of the prompt a sample assembles to (the caller applies the chat template and tokenizer).
/// vt also sizes its one-shot example with it: a sample with chat false and only an instruction.
using PromptTokenCounter = std::function<int64_t(const EvalSample&)>;

/// RULER's remove_newline_tab on one sample (niah.py: ' '.join(text.replace('\n', ' ').replace('\t',
/// ' ').split())), field by field: runs of ' ', '\n', '\t' become one space, the prompt's first
/// and last whitespace go, a field boundary keeps one space; `needles` spans are remapped.
void remove_newline_tab(EvalSample& sample);

/// Every task name generate_ruler_samples knows: RULER's niah_single_1/2/3, niah_multikey_1/2/3,
/// niah_multivalue, niah_multiquery, vt, cwe, fwe, and niah_paul_graham.
const std::vector<std::string>& ruler_task_names();

/// `options.n` samples of `options.task` (niah_paul_graham: n per depth, depth by depth), each with
/// instruction, context, question, answer_prefix, answers, max_new_tokens, task, length, id
/// ("<task>-<length>-<i>"), metric ("string_match_all"), chat, and `needles`: the byte spans in
/// `context` of the needles the answer depends on (niah: the needles of the queried keys, not the
/// other keys' needles nor the distractors of the needle haystack; vt: the chain's 5 lines; cwe:
/// every occurrence of the 10 common words; fwe: every occurrence of the 3 answer words;
/// paul_graham: the needle sentence), sorted.
///
/// Each sample's haystack (noise lines, distractor needles, essay words, code lines, cwe/fwe words)
/// is the largest for which count_tokens(sample) + max_new_tokens <= length: the sample fits and the
/// same sample with one more haystack unit would not (searched from the previous sample's size).
/// The samples depend only on the options (task, length, seed, haystack, the files' and the word
/// list's contents), identically on every platform, and the first k do not depend on n.
///
/// Throws InputError (kvscope/core/errors.h) for an unknown task (naming the known ones), an unknown
/// haystack or one the task cannot use, a length too small to hold even the smallest haystack (with
/// the numbers), missing essay/code files for a haystack that needs them, an unreadable file or
/// one without text (naming the file), a missing word list (naming the file and wamerican), n < 0,
/// a depth outside [0, 100].
std::vector<EvalSample> generate_ruler_samples(const RulerTaskOptions& options, const PromptTokenCounter& count_tokens);

}  // namespace kvscope
