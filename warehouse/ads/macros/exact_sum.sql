{#-
    Sums of measurements (ms) in exact decimal arithmetic, to the microsecond: a float sum
    depends on the order DuckDB's threads add in, and a rebuild must give the same table.
-#}
{% macro exact_sum(column) -%}
    cast(sum(cast({{ column }} as decimal(18, 3))) as double)
{%- endmacro %}

{% macro exact_mean(column) -%}
    {{ exact_sum(column) }} / count({{ column }})
{%- endmacro %}
