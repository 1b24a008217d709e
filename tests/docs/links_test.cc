// The docs' links into the code stay true. README.md and docs/*.md link a function or class to
// the line that defines it: [`Reducer::autograd_hook`](ddp/reducer.cc#L204). Each such line
// must still hold the name (its last part, as a whole word); when code moves, run
// `python3 scripts/update_doc_links.py` to move the numbers. Pictures the pages show, the files
// their plain links point at, and the files that comments in the code name must exist.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include <catch2/catch.hpp>

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<fs::path> pages() {
  std::vector<fs::path> out = {"README.md"};
  for (const auto& entry : fs::directory_iterator("docs")) {
    if (entry.path().extension() == ".md") out.push_back(entry.path());
  }
  return out;
}

struct CodeLink {
  fs::path page;
  std::string name, target;
  size_t line;
};

std::vector<CodeLink> code_links() {
  static const std::regex link(R"(\[`([A-Za-z_][\w:]*)(?:\(\))?`\]\(([^)#\s]+)#L(\d+)\))");
  std::vector<CodeLink> out;
  for (const fs::path& page : pages()) {
    const std::string text = read_file(page);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), link); it != std::sregex_iterator(); ++it) {
      out.push_back({page, (*it)[1], (*it)[2], std::stoul((*it)[3])});
    }
  }
  return out;
}

}  // namespace

TEST_CASE("docs: every code link points at a line that holds the linked name", "[docs]") {
  const std::vector<CodeLink> links = code_links();
  size_t in_readme = 0;
  for (const CodeLink& l : links) in_readme += l.page == "README.md";
  // README's walk of one gradient links each of its steps; docs/ddp.md links its tables.
  CHECK(in_readme >= 15);
  CHECK(links.size() >= 40);
  for (const CodeLink& l : links) {
    const fs::path file = (l.page.parent_path() / l.target).lexically_normal();
    INFO(l.page.string() << " links `" << l.name << "` to " << l.target << "#L" << l.line
                         << "; if the code moved, run python3 scripts/update_doc_links.py");
    REQUIRE(fs::exists(file));
    const std::vector<std::string> lines = lines_of(read_file(file));
    REQUIRE(l.line >= 1);
    REQUIRE(l.line <= lines.size());
    const std::string last = l.name.substr(l.name.rfind(':') == std::string::npos ? 0 : l.name.rfind(':') + 1);
    INFO("line " << l.line << ": " << lines[l.line - 1]);
    CHECK(std::regex_search(lines[l.line - 1], std::regex("\\b" + last + "\\b")));
  }
}

TEST_CASE("docs: the pictures the pages show exist", "[docs]") {
  static const std::regex image(R"(!\[[^\]]*\]\(([^)\s]+)\))");
  int images = 0;
  for (const fs::path& page : pages()) {
    const std::string text = read_file(page);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), image); it != std::sregex_iterator(); ++it) {
      ++images;
      INFO(page.string() << " shows " << (*it)[1]);
      CHECK(fs::exists((page.parent_path() / std::string((*it)[1])).lexically_normal()));
    }
  }
  CHECK(images >= 3);  // README's timeline; docs/ddp.md's timeline and loss curves
}

TEST_CASE("docs: every plain link to a file of the project points at one that exists", "[docs]") {
  static const std::regex link(R"(\]\(([^)\s#]+)(#[^)\s]*)?\))");
  int checked = 0;
  for (const fs::path& page : pages()) {
    const std::string text = read_file(page);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), link); it != std::sregex_iterator(); ++it) {
      const std::string target = (*it)[1];
      if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
      const fs::path file = (page.parent_path() / target).lexically_normal();
      // Only the packages this test has as data can be checked (not scripts/, tests/, bench/).
      static const std::vector<std::string> checked_roots = {"autograd", "comm",     "ddp", "docs",
                                                             "examples", "launcher", "nn",  "tensor"};
      const std::string root = file.begin() == file.end() ? "" : file.begin()->string();
      if (std::find(checked_roots.begin(), checked_roots.end(), root) == checked_roots.end()) continue;
      if (file.extension().empty()) continue;  // a directory
      // examples/downstream is a user's workspace of its own (.bazelignore): not in the runfiles.
      if (file.string().rfind("examples/downstream/", 0) == 0) continue;
      ++checked;
      INFO(page.string() << " links to " << target);
      CHECK(fs::exists(file));
    }
  }
  CHECK(checked >= 20);
}

TEST_CASE("docs: the files that comments in the code name exist", "[docs]") {
  // "see small_allreduce.h", "(tensor/native/checks.cc)": a name a file has anywhere in the
  // checked packages, or a path from the workspace root or from the commenting file.
  static const std::vector<std::string> packages = {"autograd", "comm", "ddp", "examples", "launcher", "nn", "tensor"};
  static const std::regex named(R"((?:^|[\s(`'"])((?:[\w-]+/)*[\w-]+\.(?:cc|h|cu|cuh))\b)");
  std::set<std::string> basenames;
  std::vector<fs::path> sources;
  for (const std::string& package : packages) {
    for (const auto& entry : fs::recursive_directory_iterator(package)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
      basenames.insert(entry.path().filename().string());
      sources.push_back(entry.path());
    }
  }
  int checked = 0;
  for (const fs::path& source : sources) {
    const std::vector<std::string> lines = lines_of(read_file(source));
    for (size_t n = 0; n < lines.size(); ++n) {
      const size_t comment = lines[n].find("//");
      if (comment == std::string::npos) continue;
      const std::string text = lines[n].substr(comment + 2);
      for (auto it = std::sregex_iterator(text.begin(), text.end(), named); it != std::sregex_iterator(); ++it) {
        std::string name = (*it)[1];
        if (name.rfind("tinyddp/", 0) == 0) name = name.substr(8);
        const fs::path path(name);
        const std::string root = path.begin()->string();
        const bool in_checked_package =
            !path.has_parent_path() || std::find(packages.begin(), packages.end(), root) != packages.end();
        if (!in_checked_package && fs::exists((source.parent_path() / path).lexically_normal()) == false) continue;
        ++checked;
        INFO(source.string() << ":" << n + 1 << " names " << name);
        CHECK((basenames.count(name) > 0 || fs::exists(path) ||
               fs::exists((source.parent_path() / path).lexically_normal())));
      }
    }
  }
  CHECK(checked >= 50);
}

namespace {

// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
std::string slug(const std::string& heading) {
  std::string out;
  for (const char c : heading) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '_' || c == '-' || u >= 0x80) {
      out += static_cast<char>(std::tolower(u));
    } else if (c == ' ') {
      out += '-';
    }
  }
  return out;
}

std::set<std::string> anchors_of(const fs::path& page) {
  std::set<std::string> out;
  bool in_code = false;
  for (const std::string& line : lines_of(read_file(page))) {
    if (line.rfind("```", 0) == 0) in_code = !in_code;
    if (in_code || line.empty() || line[0] != '#') continue;
    const size_t text = line.find_first_not_of('#');
    if (text != std::string::npos && line[text] == ' ') out.insert(slug(line.substr(text + 1)));
  }
  return out;
}

}  // namespace

TEST_CASE("docs: every link to a section of a page names one of its headings", "[docs]") {
  // [One training step](bench/README.md#one-training-step-against-pytorch): README's figures cite
  // the benchmark entry they come from; a renamed heading must not leave the citation dangling.
  static const std::regex link(R"(\]\(([^)\s#]*\.md)?#([^)\sL][^)\s]*)\))");
  int checked = 0;
  for (const fs::path& page : pages()) {
    const std::string text = read_file(page);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), link); it != std::sregex_iterator(); ++it) {
      const std::string target = (*it)[1];
      const fs::path file = target.empty() ? page : (page.parent_path() / target).lexically_normal();
      INFO(page.string() << " links to " << target << "#" << (*it)[2]);
      REQUIRE(fs::exists(file));
      CHECK(anchors_of(file).count((*it)[2]) == 1);
      ++checked;
    }
  }
  CHECK(checked >= 9);  // README's speed table cites bench/README.md on every row
}
