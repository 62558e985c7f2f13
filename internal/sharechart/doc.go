// Package sharechart draws the chart batchq shows fairness with: each
// tenant's share of a queue's tokens over time as solid lines, and the
// shares their weights entitle them to as dashed lines. The demo writes it
// to a file at the end of its story; the console serves it live for any
// queue. It draws with gonum's plot, as SVG or PNG, so neither needs a
// charting library in the browser.
package sharechart
