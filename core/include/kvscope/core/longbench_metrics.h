#pragma once
// LongBench's metrics (issue 32), as THUDM/LongBench LongBench/metrics.py defines them (NVIDIA/kvpress
// evaluation/benchmarks/longbench/calculate_metrics.py has the same): one prediction against one
// ground truth, a score in [0, 1]. score() (eval_score.h) takes the best over a sample's answers,
// as LongBench's eval.py does. The Chinese metrics that need jieba's word segmentation
// (qa_f1_zh_score, rouge_zh_score) are not here. Python's str semantics are followed on code points
// with two limits: lower case is lower_latin1's (eval_score.h), and a word character for
// normalize_answer's \b is approximated (see there). Torch-free (kvscope_spec); docs/eval.md lists
// the metrics.
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

/// LongBench's normalize_answer: lower case (lower_latin1), every ASCII punctuation character
/// (Python's string.punctuation) removed, the articles "a", "an", "the" between word boundaries
/// (Python's re \b) replaced by a space, then the words (Python's str.split()) joined by one space.
/// For \b, ASCII letters, digits and '_' are word characters, and so is every other character except
/// Python whitespace, U+0080..U+00BF (but ª ² ³ µ ¹ º ¼ ½ ¾), U+00D7, U+00F7, U+2000..U+206F,
/// U+2190..U+245F, U+2500..U+2775, U+2794..U+2BFF, U+3000..U+3004, U+3008..U+3020, U+3030, the
/// full-width punctuation of U+FF01..U+FF65, U+FFF0..U+FFFF, U+1F300..U+1FAFF and bytes that are not
/// UTF-8. (Python's \w differs beyond these, e.g. for combining marks.)
std::string normalize_answer(std::string_view text);

/// qa_f1_score: the token F1 of normalize_answer(prediction) against normalize_answer(ground_truth),
/// tokens split on whitespace, common tokens counted as a multiset intersection; 0 when none is
/// common. F1 = 2PR / (P + R), P = common / prediction tokens, R = common / ground-truth tokens.
double qa_f1_score(std::string_view prediction, std::string_view ground_truth);

/// rouge_score: ROUGE-L F of the `rouge` package (pltrdy/rouge 1.0.1, Rouge().get_scores(...)
/// ["rouge-l"]["f"], summary level, exclusive): each text is split on '.' into sentences (empty
/// pieces dropped, each piece's words re-joined by one space, so a piece of spaces is an empty
/// sentence of one empty word); m, n = the numbers of distinct words of the reference and the
/// prediction; for every reference sentence r and prediction sentence c, one longest common word
/// subsequence of r and c (the package's back-tracking from the ends: on a mismatch it drops r's
/// word only when that keeps a strictly longer subsequence, else c's) adds its words to one set U;
/// R = |U| / m, P = |U| / n, F = 2PR / (P + R + 1e-8). Case-sensitive; no stemming. 0 when either
/// text has no sentence (LongBench catches the package's ValueError and scores 0). (The package's
/// back-tracking is recursive: for sentence pairs of around 1000 words together it exceeds Python's
/// recursion limit and LongBench scores 0; kvscope scores them.)
double rouge_score(std::string_view prediction, std::string_view ground_truth);

/// classification_score: the classes of `all_classes` that are substrings of the prediction; then,
/// walking that list as Python's `for` does while its body removes items (so the item after a
/// removed one is skipped), each class that is a substring of the ground truth but not equal to it
/// is removed (its first occurrence); the score is 1 / (classes left) if the ground truth is among
/// them, else 0. Case-sensitive.
double classification_score(std::string_view prediction, std::string_view ground_truth,
                            const std::vector<std::string>& all_classes);

/// retrieval_score: the number n of the first "Paragraph <n>" in the ground truth; the fraction of
/// the numbers (maximal runs of Unicode decimal digits, Python's \d) in the prediction that equal
/// n as text; 0 when the prediction has no number. Throws InputError when the ground truth has no
/// "Paragraph <n>" (LongBench would fail with an IndexError).
double retrieval_score(std::string_view prediction, std::string_view ground_truth);

/// retrieval_zh_score: retrieval_score with "段落<n>" (LongBench's passage_retrieval_zh).
double retrieval_zh_score(std::string_view prediction, std::string_view ground_truth);

/// count_score: the fraction of the numbers in the prediction (as retrieval_score) equal to the
/// ground truth as text; 0 when the prediction has no number.
double count_score(std::string_view prediction, std::string_view ground_truth);

/// code_sim_score: the first line (of the prediction with its leading '\n' removed, split on '\n')
/// that contains none of '`', '#', "//" ("" if none does); fuzz_ratio(that line, ground truth) / 100.
double code_sim_score(std::string_view prediction, std::string_view ground_truth);

/// fuzzywuzzy's fuzz.ratio without python-Levenshtein (LongBench's requirements leave it out): 100
/// when a == b, 0 when either is empty, else round(100 * sequence_matcher_ratio(a, b)) with
/// Python's round (half to even).
int fuzz_ratio(std::string_view a, std::string_view b);

/// Python's difflib.SequenceMatcher(None, a, b).ratio() over the code points of a and b (a byte
/// that is not UTF-8 is one element of its own): 2M / (len(a) + len(b)), M the characters of the
/// matching blocks found by its longest-match recursion, with autojunk (when b has 200 characters or
/// more, a character occurring more than len(b) / 100 + 1 times in b starts no match); 1 when both
/// are empty.
double sequence_matcher_ratio(std::string_view a, std::string_view b);

/// LongBench's prediction post-processing for trec, triviaqa, samsum and lsht (eval.py):
/// prediction.lstrip('\n').split('\n')[0], the first line after leading newlines.
std::string_view longbench_first_line(std::string_view prediction);

}  // namespace kvscope
