{#- The error types model_daily counts in columns of their own (DESIGN §2); others go to errors_other. -#}
{% macro known_error_types() -%}
    {{ return(['invalid_request', 'rate_limited', 'oom', 'timeout', 'upstream_error']) }}
{%- endmacro %}
