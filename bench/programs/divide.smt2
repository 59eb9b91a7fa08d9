; z3's load under bench/run_preload.sh: that an unsigned division and
; remainder put x back together, for 11-bit vectors, proved by bit-blasting
; them into a SAT problem (clauses made, learnt and dropped): ~1.5 s
(set-logic QF_BV)
(declare-const x (_ BitVec 11))
(declare-const y (_ BitVec 11))
(assert (not (= y (_ bv0 11))))
(assert (not (= x (bvadd (bvmul (bvudiv x y) y) (bvurem x y)))))
(check-sat)
