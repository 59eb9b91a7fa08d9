// containers.cpp — a C++ program of the standard containers, threads and
// over-aligned new, run with and without the LD_PRELOAD drop-in
// (tests/preload_test.sh compares the output).
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>
struct alignas(64) Wide { double v[8]; };
int main() {
    std::map<std::string, std::vector<int>> m;
    for (int i = 0; i < 100000; i++) m[std::to_string(i % 5000)].push_back(i);
    std::unordered_map<int, std::string> u;
    for (int i = 0; i < 100000; i++) u[i] = std::string(i % 100, 'x');
    std::vector<std::unique_ptr<Wide>> w;
    for (int i = 0; i < 10000; i++) { w.emplace_back(new Wide{}); if (reinterpret_cast<uintptr_t>(w.back().get()) % 64) return 1; }
    std::vector<std::thread> ts;
    long sums[4] = {};
    for (int t = 0; t < 4; t++) ts.emplace_back([&, t] { std::vector<std::string> v; for (int i = 0; i < 50000; i++) v.push_back(std::to_string(i * t)); for (auto &s : v) sums[t] += s.size(); });
    for (auto &t : ts) t.join();
    size_t total = 0; for (auto &[k, v] : m) total += v.size();
    size_t chars = 0; for (auto &[k, s] : u) chars += s.size();
    std::cout << m.size() << " " << total << " " << chars << " " << sums[0] + sums[1] + sums[2] + sums[3] << "\n";
}
