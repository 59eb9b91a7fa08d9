# Ruby's load under bench/run_preload.sh: strings, arrays and hashes made,
# grown, sorted and dropped, as a Ruby program's objects come and go; malloc
# serves what Ruby's own heap does not (strings past their embedded size,
# the arrays' and hashes' tables)
srand(7)
words = Array.new(2000) { |i| "word#{i}" * (1 + i % 7) }
total = 0
20.times do
  table = {}
  20_000.times do |i|
    key = words[rand(words.size)] + i.to_s
    (table[key] ||= []) << words[rand(words.size)] * (1 + rand(4))
  end
  lines = table.map { |k, v| "#{k}: #{v.join(',')}" }.sort
  total += lines.sum(&:size)
  buf = +""
  lines.each_slice(100) { |s| buf << s.join("\n") }
  total += buf.size
end
puts total
