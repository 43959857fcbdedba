#include "identity_elide.h"

#include <algorithm>
#include <utility>

namespace kvscope::figures {
namespace {

// Code points of s as byte substrings (malformed bytes stand alone).
std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
    if (i + n > s.size()) n = 1;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string join(const std::vector<std::string>& cp, std::size_t from, std::size_t to) {
  std::string s;
  for (std::size_t i = from; i < to; ++i) s += cp[i];
  return s;
}

// Cut at the end: the first width - 1 code points and "…".
std::string cut_end(const std::vector<std::string>& cp, std::size_t width) {
  if (cp.size() <= width) return join(cp, 0, cp.size());
  return join(cp, 0, width - 1) + kElision;
}

}  // namespace

std::size_t utf8_length(const std::string& s) { return code_points(s).size(); }

std::vector<std::string> elide_identities(const std::vector<std::string>& ids, int width_in) {
  const std::size_t width = static_cast<std::size_t>(std::max(1, width_in));
  std::vector<std::vector<std::string>> cps;
  cps.reserve(ids.size());
  for (const auto& s : ids) cps.push_back(code_points(s));
  std::vector<std::string> out;
  out.reserve(ids.size());
  const bool all_equal = std::all_of(ids.begin(), ids.end(), [&](const std::string& s) { return s == ids.front(); });
  if (ids.size() < 2 || all_equal) {
    for (const auto& cp : cps) out.push_back(cut_end(cp, width));
    return out;
  }
  // Shared prefix and (non-overlapping) suffix, in code points.
  std::size_t min_len = cps[0].size();
  for (const auto& cp : cps) min_len = std::min(min_len, cp.size());
  std::size_t pre = 0;
  while (pre < min_len && std::all_of(cps.begin(), cps.end(), [&](const auto& cp) { return cp[pre] == cps[0][pre]; }))
    ++pre;
  std::size_t suf = 0;
  while (suf < min_len - pre && std::all_of(cps.begin(), cps.end(), [&](const auto& cp) {
           return cp[cp.size() - 1 - suf] == cps[0][cps[0].size() - 1 - suf];
         }))
    ++suf;
  for (const auto& cp : cps) {
    const std::size_t n = cp.size();
    if (n <= width) {
      out.push_back(join(cp, 0, n));
      continue;
    }
    const std::size_t mid = n - pre - suf;  // the differing part: always kept
    std::size_t keep_pre = pre, keep_suf = suf;
    auto need = [&] { return mid + keep_pre + keep_suf + (keep_pre < pre) + (keep_suf < suf); };
    // Shrink the context around the difference, the suffix first while it is more than half the
    // prefix kept (the text just before a difference names what differs: "alpha=").
    while (need() > width && (keep_pre > 0 || keep_suf > 0)) {
      if (keep_suf > 0 && (keep_suf * 2 > keep_pre || keep_pre == 0))
        --keep_suf;
      else
        --keep_pre;
    }
    // Snap the prefix cut to a stage boundary ('+'), else to a parameter or field boundary (',',
    // ':', ' '), when that drops at most half of what is kept: "…+adakv:…", not "…2+adakv:…".
    if (keep_pre < pre && keep_pre > 1) {
      const std::size_t start = pre - keep_pre;
      std::size_t snap = keep_pre;
      for (const auto& seps : {std::vector<std::string>{"+"}, std::vector<std::string>{",", ":", " "}}) {
        for (std::size_t i = start; i < pre && (i - start) * 2 <= keep_pre && snap == keep_pre; ++i)
          if (std::find(seps.begin(), seps.end(), cp[i]) != seps.end()) snap = pre - i;
        if (snap != keep_pre) break;
      }
      keep_pre = snap;
    }
    std::string s = keep_pre < pre ? kElision : "";
    s += join(cp, pre - keep_pre, pre + mid + keep_suf);
    if (keep_suf < suf) s += kElision;
    out.push_back(std::move(s));
  }
  return out;
}

std::pair<std::string, std::string> elide_pair(const std::string& a, const std::string& b, int width) {
  auto v = elide_identities({a, b}, width);
  return {std::move(v[0]), std::move(v[1])};
}

}  // namespace kvscope::figures
