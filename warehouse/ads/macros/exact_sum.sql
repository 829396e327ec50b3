{#-
    Sums and means of measurements (ms) in exact decimal arithmetic, to the microsecond: a float
    sum depends on the order DuckDB's threads add in, and a rebuild must give the same table.
    `where` restricts the aggregate to the rows it holds for (an aggregate FILTER).
-#}
{% macro exact_sum(column, where=none) -%}
    cast(sum(cast({{ column }} as decimal(18, 3))){{ aggregate_filter(where) }} as double)
{%- endmacro %}

{% macro exact_mean(column, where=none) -%}
    {{ exact_sum(column, where) }} / count({{ column }}){{ aggregate_filter(where) }}
{%- endmacro %}

{% macro aggregate_filter(where) -%}
    {%- if where %} filter (where {{ where }}){% endif -%}
{%- endmacro %}
